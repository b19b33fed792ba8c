"""The results page is generated from the committed rows: every table on benchmarks/RESULTS.md is drawn again
from results/published and must match the page to the character; every decimal a section's prose quotes must
be in one of that section's tables; `modsar report` and `modsar analyze --from` read the committed folders
and give what was committed."""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from modsar.cli import main

ROOT = Path(__file__).resolve().parent.parent
PUBLISHED = ROOT / "results" / "published"


def _published():
    spec = importlib.util.spec_from_file_location("published", ROOT / "benchmarks" / "published.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["published"] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


published = _published()


def test_every_table_on_the_page_matches_its_rows():
    assert published.problems() == []


def test_every_committed_group_is_read_by_a_table():
    groups = {g for t in published.TABLES.values() for g in t.groups}
    assert groups == {p.name for p in PUBLISHED.iterdir() if p.is_dir()}


@pytest.mark.slow
def test_a_changed_number_fails_the_check(tmp_path):
    page = published.PAGE.read_text()
    block = published.block("residual-table3")
    assert block in page
    # a digit changed inside a generated table
    wrong = page.replace(block, block.replace("| 3 |", "| 4 |", 1))
    (tmp_path / "a.md").write_text(wrong)
    assert any("residual-table3" in p and "differs" in p for p in published.problems(tmp_path / "a.md"))
    # a figure in a sentence that no table of its section holds
    section = "### Tables 2 and 3 with seeds\n"
    (tmp_path / "b.md").write_text(page.replace(section, section + "\nSASRec's +Res is .987 here.\n"))
    assert any("'.987'" in p for p in published.problems(tmp_path / "b.md"))
    # a table the page does not show
    (tmp_path / "c.md").write_text(page.replace("<!-- generated: views -->", "<!-- views -->"))
    assert any("'views' is not on the page" in p for p in published.problems(tmp_path / "c.md"))


def test_numbers_are_compared_without_leading_zeros_or_signs():
    text = "0.116 and −.005 and +3.9%, not 12, v0.4 or torch 2.13.0; the same .116, -0.5."
    assert published._numbers(text) == {".116", "-.005", "3.9%", "-.5"}


def test_the_status_rule_on_the_page_is_the_one_applied():
    assert f"within {published.REPRODUCED_WITHIN:.0%} of the paper's figure" in published.PAGE.read_text()


def test_modsar_report_regenerates_the_committed_report(tmp_path):
    assert (
        main(
            [
                "report",
                "--results",
                str(PUBLISHED / "quickstart"),
                "--experiment",
                "quickstart-synthetic",
                "--out",
                str(tmp_path),
            ]
        )
        == 0
    )
    committed = PUBLISHED / "quickstart" / "report" / "report.md"
    assert (tmp_path / "report.md").read_text() == committed.read_text()


@pytest.mark.parametrize(
    "folder", sorted(str(p.relative_to(PUBLISHED)) for p in PUBLISHED.rglob("diagnostics.parquet"))
)
def test_modsar_analyze_from_reads_each_committed_analysis(tmp_path, folder):
    source = PUBLISHED / folder
    assert main(["analyze", "--from", str(source.parent), "--out", str(tmp_path)]) == 0
    again, committed = (pd.read_parquet(p / "diagnostics.parquet") for p in (tmp_path, source.parent))
    key = ["model", "diagnostic", "quantity", "layer", "alpha"]
    pd.testing.assert_frame_equal(
        again.sort_values(key).reset_index(drop=True)[committed.columns],
        committed.sort_values(key).reset_index(drop=True),
    )


@pytest.mark.parametrize("doc", ["README.md", "docs/index.md"])
def test_the_quickstart_figures_a_newcomer_reads_are_the_committed_ones(doc):
    paragraphs = (ROOT / doc).read_text().split("\n\n")
    quoted = next(p for p in paragraphs if "0.6931" in p)
    assert published._numbers(quoted) <= published._numbers(published.block("quickstart"))


def test_the_headline_verdict_the_readme_quotes_is_the_committed_one():
    paragraphs = (ROOT / "README.md").read_text().split("\n\n")
    quoted = next(p for p in paragraphs if "AR wins" in p and "table5-beauty" in p)
    blocks = ("table5-beauty-paper", "table6-beauty-paper", "search-time")
    committed = published._numbers("".join(published.block(name) for name in blocks))
    assert published._numbers(quoted) <= committed


def test_every_group_has_a_command_and_every_command_a_group():
    script = (ROOT / "benchmarks" / "rerun_published.sh").read_text()
    cases = set(re.findall(r"^  ([a-z0-9-]+)\)", script, flags=re.M))
    assert cases == {p.name for p in PUBLISHED.iterdir() if p.is_dir()}


def test_one_config_and_seed_give_one_curve_across_groups():
    """residual-toys trains the seed-0 SASRec of residual-table2 again (another command, another day); both
    groups must come from one modsar version (re-run them together), and then the two rows are one run."""
    again = published.rows_of("residual-toys", "residual-toys").iloc[0]
    rows = published.rows_of("residual-table2", "residual-toys")
    first = rows[(rows["backbone"] == "modular") & (rows["seed"] == 0)].iloc[0]
    versions = [json.loads(r["versions"])["modsar"] for r in (first, again)]
    assert versions[0] == versions[1], f"re-run residual-table2 and residual-toys together: {versions}"
    settings = [c for c in first.index if c.startswith(("model.", "data.", "loss.", "train."))]
    assert first[settings].astype(str).equals(again[settings].astype(str))
    assert (first["curve"], first["test.ndcg@10"]) == (again["curve"], again["test.ndcg@10"])


def test_the_table5_lines_refuse_what_would_make_them_silently_partial(tmp_path, monkeypatch):
    import shutil

    import pyarrow.parquet as pq

    folder = tmp_path / "table5-beauty"
    shutil.copytree(PUBLISHED / "table5-beauty", folder)
    monkeypatch.setattr(published, "PUBLISHED", tmp_path)
    # all four design choices: the row's figures are judged
    row = next(published.table5_rows("table5-beauty").itertuples())
    assert row.spaces == list(published.TABLE5_SPACES)
    assert published.row_status(row, "reproduced") == "reproduced"
    assert "; all 4 design choices)" in published._table5_claims(row)[0].claim
    # three of the four: the row's figures stay open, saying what they are so far
    shutil.rmtree(folder / "loss_ce-beauty")
    lines = published.table5_rows("table5-beauty")
    assert list(lines["spaces"]) == [["local_attn", "ssept", "loss_bpr"]]
    row = next(lines.itertuples())
    assert published.row_status(row, "reproduced") == "open: 3 of 4 design choices run (so far: reproduced)"
    assert "; choices run: local_attn, ssept, loss_bpr of 4)" in published._table5_claims(row)[0].claim
    # a search not recorded complete
    meta = folder / "ssept-beauty" / "search.json"
    stored = json.loads(meta.read_text())
    meta.write_text(json.dumps({**stored, "status": "interrupted"}))
    with pytest.raises(ValueError, match="not recorded complete: ssept-beauty"):
        published.design_cells("table5-beauty")
    meta.write_text(json.dumps(stored))
    # a design choice whose AR side has no row left
    for path in (folder / "loss_bpr-beauty" / "trials").glob("*.parquet"):
        if pq.read_table(path, columns=["task"]).column("task")[0].as_py() == "ar":
            path.unlink()
    with pytest.raises(ValueError, match="loss_bpr on beauty lacks an AE or an AR value"):
        published.design_cells("table5-beauty")


def test_table6_lines_hold_only_its_backbones_and_name_those_not_run(tmp_path, monkeypatch):
    import shutil

    import pyarrow.parquet as pq

    folder = tmp_path / "table5-beauty"
    shutil.copytree(PUBLISHED / "table5-beauty", folder)
    for backbone in folder.glob("hf_*-beauty"):  # start from no Table 6 backbone, whatever is published
        shutil.rmtree(backbone)
    shutil.copytree(PUBLISHED / "search-cost", tmp_path / "search-cost")  # the open line's estimates
    monkeypatch.setattr(published, "PUBLISHED", tmp_path)
    five = published.design_cells("table5-beauty")
    assert published.not_run(five, "beauty", published.TABLE5_SPACES) == []  # all four design choices run
    assert len(published.design_cells("table5-beauty", spaces=published.TABLE6_SPACES)) == 0
    # loss_bpr's rows relabelled as an ALBERT search: they leave Table 5's row and make Table 6's line
    for path in (folder / "loss_bpr-beauty" / "trials").glob("*.parquet"):
        table = pq.read_table(path)
        index = table.schema.get_field_index("space")
        pq.write_table(table.set_column(index, "space", pa.array(["hf_albert"] * len(table))), path)
    six = published.design_cells("table5-beauty", spaces=published.TABLE6_SPACES)
    assert list(six["space"]) == ["hf_albert"]
    assert round(six["improv"].iloc[0], 2) == 75.65  # the page's loss_bpr line: AR .0482 over AE .0274
    assert list(published.table5_rows("table5-beauty")["spaces"]) == [["local_attn", "ssept", "loss_ce"]]
    missing = published.not_run(six, "beauty", published.TABLE6_SPACES)
    assert missing == [("beauty", "hf_llama"), ("beauty", "hf_transfo_xl")]
    # the summary's open line keeps every Table 6 backbone in view: those to run, and those run but not judged
    beauty, others = published._open_tables_claims()
    assert beauty.claim == (
        "ModSAR Table 6 on Beauty (no rows published yet: hf_llama, hf_transfo_xl; run, without the paper's "
        "figures to judge: hf_albert)"
    )
    assert beauty.status == "open"
    # the other datasets' line: the committed estimates summed per dataset (14.2, 18.5 and 16.7 hours)
    assert others.claim == "ModSAR Tables 5 and 6 on Sports, Video and Yelp"
    assert others.status == (
        "open: by the default search's estimate, Sports 14, Video 19, Yelp 17 hours for the 7 spaces "
        "(seed re-runs aside)"
    )
    page = published.design_markdown([*six.itertuples()], missing, [], "backbone", published.TABLE6_SPACES)
    page = page.splitlines()
    assert page[2].startswith("| beauty | hf_albert | 3 | .0274 | .0482 | +75.65% |")
    assert page[3] == "| beauty | hf_llama | – | – | – | – | – | – | – | open: no rows published yet |"
    # a Table 6 search still running leaves Table 5's lines as they are, and only its own table refuses it
    meta = folder / "loss_bpr-beauty" / "search.json"
    meta.write_text(json.dumps({**json.loads(meta.read_text()), "status": "running"}))
    assert list(published.table5_rows("table5-beauty")["spaces"]) == [["local_attn", "ssept", "loss_ce"]]
    with pytest.raises(ValueError, match="not recorded complete: loss_bpr-beauty"):
        published.design_cells("table5-beauty", spaces=published.TABLE6_SPACES)


def test_the_search_proof_stays_open_until_its_default_searches_are_complete(tmp_path, monkeypatch):
    import shutil

    import pyarrow.parquet as pq

    for dataset in ("synthetic", "ml-100k"):  # the datasets it reads
        for search in ("full-grid", "s0", "s1", "s2"):
            name = f"local_attn-{dataset}-{search}"
            shutil.copytree(PUBLISHED / "search-proof" / name, tmp_path / "search-proof" / name)
    monkeypatch.setattr(published, "PUBLISHED", tmp_path)
    table = published.search_proof()
    assert (
        "| synthetic | winner, test N@10 | AR (+18.4%; AR ahead on 3 of 3 seeds) | AR (+18.0%; AR ahead on 3 "
        "of 3 seeds), AR (+21.4%; AR ahead on 3 of 3 seeds), AR (+19.8%; AR ahead on 3 of 3 seeds) "
        "|  |  | same |  |"
    ) in table
    # the criterion, judged: each default search's pick re-run on seeds 0-2 against the grid's seeds
    assert "| 3 of 3 | -0.4% (-3.4% to +2.7%) | 3 of 3 (+0.0%, -2.5%, -1.2%) |" in table
    assert "| 1 of 3 | +5.2% (-12.6% to +23.0%) | 3 of 3 (+7.1%, +1.5%, +12.7%) |" in table
    assert (
        "| ml-100k | winner, test N@10 | AR (+15.6%; AR ahead on 3 of 3 seeds) | AR (+8.0%; AR ahead on "
        in table
    )
    # a search whose picks were not re-run on seeds is judged on its picks alone, and leaves the answer open
    for path in (tmp_path / "search-proof" / "local_attn-synthetic-s0" / "trials").glob("*.parquet"):
        if pq.read_table(path, columns=["role"]).column("role")[0].as_py() == "seed":
            path.unlink()
    winner = next(line for line in published.search_proof().splitlines() if "synthetic | winner" in line)
    assert (
        "| AR (+17.9%, on its picks), AR (+21.4%; AR ahead on 3 of 3 seeds), " in winner
        and winner.endswith("| open (so far same) |  |")
    )
    ae = next(line for line in published.search_proof().splitlines() if line.startswith("| synthetic | AE |"))
    assert ae.endswith("| 2 of 2 (-2.5%, -1.2%) |")  # seed 0's pick has no re-runs now: not judged
    # a default search still running: its pick is not counted, and the dataset's answer is open
    meta = tmp_path / "search-proof" / "local_attn-synthetic-s2" / "search.json"
    meta.write_text(json.dumps({**json.loads(meta.read_text()), "status": "running"}))
    # and one whose AR direction has no selected trial yet
    trials = tmp_path / "search-proof" / "local_attn-synthetic-s1" / "trials"
    for path in trials.glob("*.parquet"):
        frame = pq.read_table(path).to_pandas()
        if frame["task"].iloc[0] == "ar" and frame["role"].iloc[0] == "search":
            pq.write_table(
                pq.read_table(path).set_column(
                    list(frame.columns).index("selected"), "selected", [[False] * len(frame)]
                ),
                path,
            )
    table = published.search_proof()
    ar = next(line for line in table.splitlines() if line.startswith("| synthetic | AR |"))
    assert ".6854 (open: 1 of 3 default searches complete, with a pick)" in ar and "1 of 1" in ar
    winner = next(line for line in table.splitlines() if "synthetic | winner" in line)
    assert winner.endswith(
        "| AR (+17.9%, on its picks) (open: 1 of 3 default searches complete, with a pick) |  |  | "
        "open (so far same) |  |"
    )
    cost = published.search_proof_cost()
    assert "| default, seed 2 (running: not counted) |" in cost and "full grid / default (mean of 2)" in cost
    # no wall-clock saving where the rows do not name one CPU for every search
    assert cost.count("– (CPU not recorded)") == 2


def test_a_full_grid_still_running_leaves_its_dataset_open(tmp_path, monkeypatch):
    import shutil

    shutil.copytree(PUBLISHED / "search-proof", tmp_path / "search-proof")
    monkeypatch.setattr(published, "PUBLISHED", tmp_path)
    meta = tmp_path / "search-proof" / "local_attn-synthetic-full-grid" / "search.json"
    meta.write_text(json.dumps({**json.loads(meta.read_text()), "status": "interrupted"}))
    assert (
        "| synthetic | all | open: the full grid is interrupted, its seeds not all in |  |  |  |  |  |"
        in published.search_proof()
    )


def test_within_the_spread_is_a_difference_whose_95_interval_holds_0():
    grid = np.array([1.0, 1.1, 0.9])
    assert published._within_spread(grid, [grid.copy()]) == "1 of 1 (+0.0%)"
    assert published._within_spread(grid, [grid + 1.0, grid + 0.05]) == "1 of 2 (+100.0%, +5.0%)"
    assert published._within_spread(grid, []) == "– (no seed re-runs)"


def test_a_wall_clock_saving_needs_one_cpu_for_every_search_and_says_where_it_was_shared():
    frame = pd.DataFrame
    grid = frame({"cpus": [["A (AVX2)"]], "loads": [[2.1]], "clock_lost": [False]})
    same = frame({"cpus": [["A (AVX2)"]] * 3, "loads": [[2.0], [2.2], []], "clock_lost": [False] * 3})
    assert published._wall_saving(grid, same, "3.00x") == "3.00x"
    # a search's two trials make a load of about 2 on 2 CPUs: well above, other work shared the machine
    shared = same.assign(loads=[[2.0], [3.4], []])
    assert published._wall_saving(grid, shared, "3.00x") == "3.00x (shared: mean load 2.0 to 3.4 on 2 CPUs)"
    other = same.assign(cpus=[["A (AVX2)"], ["B (AVX512)"], ["A (AVX2)"]])
    assert published._wall_saving(grid, other, "3.00x") == "– (CPUs differ)"
    mixed = same.assign(cpus=[["A (AVX2)"], [], ["A (AVX2)"]])  # one search's rows do not say
    assert published._wall_saving(grid, mixed, "3.00x") == "– (CPU not recorded for every search)"
    unsaid = same.assign(cpus=[[]] * 3)
    assert published._wall_saving(grid.assign(cpus=[[]]), unsaid, "3.00x") == "– (CPU not recorded)"
    assert published._wall_saving(grid, same.assign(clock_lost=[False, True, False]), "3.00x") == "–"


def test_the_summary_judges_the_proof_by_every_complete_dataset(tmp_path, monkeypatch):
    """The summary's proof line counts the default searches that give the grid's winner and the picks within
    its spread, over the datasets whose grid and three default searches are complete; one search whose AR
    picks, re-run on seeds, score far below turns it to not reproduced, and a running one leaves its dataset
    out."""
    import shutil

    import pyarrow as pa
    import pyarrow.parquet as pq

    for search in ("full-grid", "s0", "s1", "s2"):  # one dataset's searches: quicker to read
        name = f"local_attn-synthetic-{search}"
        shutil.copytree(PUBLISHED / "search-proof" / name, tmp_path / "search-proof" / name)
    monkeypatch.setattr(published, "PUBLISHED", tmp_path)
    claim = published._proof_claim()
    assert (claim.status, claim.difference) == ("reproduced", "same winner")
    assert (
        claim.ours
        == "the grid's winner in 3 of 3 default searches (ahead on each of its seeds in 3); 6 of 6 picks "
        "within the grid's seed spread (95% interval of the difference holds 0), 5 of 6 with their seeds' "
        "mean inside the grid's seed range; on sets where the rungs never decide"
    )
    assert claim.claim.endswith("; synthetic)") and claim.paper == "full grid: AR"
    for path in (tmp_path / "search-proof" / "local_attn-synthetic-s0" / "trials").glob("*.parquet"):
        frame = pq.read_table(path).to_pandas()
        if frame["task"].iloc[0] == "ar" and frame["role"].iloc[0] == "seed":
            pq.write_table(
                pa.Table.from_pandas(frame.assign(**{"test.ndcg@10": 0.1}), preserve_index=False), path
            )
    claim = published._proof_claim()
    assert claim.status == "not reproduced" and claim.difference == "other winner or outside the spread"
    assert claim.ours.startswith(
        "the grid's winner in 2 of 3 default searches (ahead on each of its seeds in 2); 5 of 6 picks"
    ), claim.ours
    meta = tmp_path / "search-proof" / "local_attn-synthetic-s2" / "search.json"
    meta.write_text(json.dumps({**json.loads(meta.read_text()), "status": "running"}))
    claim = published._proof_claim()
    assert (claim.status, claim.ours) == (
        "open",
        "no dataset's full grid and three default searches complete",
    )


def test_show_refuses_a_name_that_is_no_table_before_reading_any_rows(monkeypatch, capsys):
    """`show nosuch` (and `show` alone) is one line naming the tables, exit 2, not a KeyError traceback;
    every name is checked before any table reads its rows."""
    import dataclasses

    for name, table in published.TABLES.items():  # a table that read its rows would fail the test
        unread = dataclasses.replace(table, draw=lambda name=name: pytest.fail(f"{name}'s rows were read"))
        monkeypatch.setitem(published.TABLES, name, unread)
    for argv, said in (
        (["show", "views", "nosuch"], "unknown table 'nosuch'; the tables: datasets, "),
        (["show"], "show needs a table NAME; the tables: datasets, "),
        (["nosuch"], "no command 'nosuch'; the commands: list, show NAME ..., write, check"),
        (["write", "views"], "write takes no table names (got views): it reads every table"),
    ):
        assert published.main(argv) == 2, argv
        out, err = capsys.readouterr()
        assert out == "" and len(err.splitlines()) == 1 and err.startswith(said), (argv, err)
    assert published.main(["show", "nosuch"]) == 2
    assert "(python benchmarks/published.py list)" in capsys.readouterr().err
    assert published.main(["--help"]) == 0
    assert "show NAME ...  # those tables" in capsys.readouterr().out


def test_rows_that_cannot_be_drawn_are_one_line_in_show_write_and_check(tmp_path, monkeypatch, capsys):
    """A selected row whose validation metric is NaN makes `modsar report` refuse the rows (ModsarError):
    `show` names the table with the error's one line and exits 1, as `write` and `check` do."""
    import shutil

    import pyarrow.parquet as pq

    shutil.copytree(PUBLISHED / "quickstart", tmp_path / "quickstart")
    damaged = None
    for path in sorted((tmp_path / "quickstart" / "quickstart-synthetic" / "trials").glob("*.parquet")):
        frame = pq.read_table(path).to_pandas()
        if damaged is None and frame["selected"].astype(bool).any():
            valid = [c for c in frame.columns if c.startswith("valid.")]
            pq.write_table(pa.Table.from_pandas(frame.assign(**dict.fromkeys(valid, np.nan))), path)
            damaged = frame.loc[frame["selected"].astype(bool), "trial_id"].iloc[0]
    assert damaged is not None
    monkeypatch.setattr(published, "PUBLISHED", tmp_path)
    said = (
        "table 'quickstart' cannot be drawn from its rows: ModsarError: experiment quickstart-synthetic, "
        f"trial {damaged}: selected, but its valid.ndcg@10 is nan"
    )
    assert published.main(["show", "quickstart"]) == 1
    out, err = capsys.readouterr()
    assert out == "" and len(err.splitlines()) == 1 and err.startswith(said), err
    page = tmp_path / "RESULTS.md"
    text = "# Results\n\n<!-- generated: quickstart -->\nas it was\n<!-- end: quickstart -->\n"
    page.write_text(text)
    assert published.write(page) == 1
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and err.startswith(
        f"not regenerated (its block kept as it was): {said}"
    )
    assert page.read_text() == text
    assert next(p for p in published.problems(page) if "quickstart" in p).startswith(said)
