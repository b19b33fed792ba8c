"""`modsar report` on a hand-built result set: cell by cell, with marks, missing cells, seeds and p-values."""

from __future__ import annotations

import html.parser
import json
import re

import pytest
from scipy import stats

from modsar.cli import main
from modsar.records.rows import write_row


def row(
    trial,
    dataset,
    space,
    task,
    ndcg10,
    *,
    seed=0,
    role="search",
    selected=True,
    status="finished",
    experiment=None,
    **config,
):
    metrics = {
        f"test.{m}": (ndcg10 if m == "ndcg@10" or ndcg10 is None else ndcg10 / 2)
        for m in ("recall@5", "recall@10", "recall@20", "ndcg@5", "ndcg@10", "ndcg@20")
    }
    return {
        "experiment": experiment or f"{space}-{dataset}",
        "trial_id": trial,
        "dataset": dataset,
        "space": space,
        "task": task,
        "seed": seed,
        "role": role,
        "selected": selected,
        "status": status,
        "valid.ndcg@10": ndcg10,
        "curve": json.dumps([[1, ndcg10], [2, ndcg10]]),
        "model.num_heads": 1,
        **metrics,
        **config,
    }


@pytest.fixture
def results(tmp_path):
    root = str(tmp_path / "results")
    rows = [
        # Table 5: video has local_attn and loss_ce; beauty lacks loss_ce AE (a missing cell).
        row("a1", "video", "local_attn", "ae", 0.040),
        row("a2", "video", "local_attn", "ar", 0.050),
        row("a3", "video", "loss_ce", "ae", 0.045),
        row("a4", "video", "loss_ce", "ar", 0.044),
        row("a5", "video", "loss_ce", "ar", 0.060, selected=False),  # not selected: must not count
        row("b1", "beauty", "local_attn", "ae", 0.030),
        row("b2", "beauty", "local_attn", "ar", 0.033),
        row("b3", "beauty", "loss_ce", "ar", 0.036),
        # Table 4 with three seeds per side on video (selected search rows are replaced by seed rows).
        row("v1", "video", "vanilla", "ae", 0.020),
        row("v2", "video", "vanilla", "ar", 0.030),
    ]
    ae_seeds, ar_seeds = [0.030, 0.032, 0.031], [0.040, 0.045, 0.041]
    for s, (ae, ar) in enumerate(zip(ae_seeds, ar_seeds, strict=True)):
        rows += [
            row(f"sae{s}", "video", "vanilla", "ae", ae, seed=s, role="seed", selected=False),
            row(f"sar{s}", "video", "vanilla", "ar", ar, seed=s, role="seed", selected=False),
        ]
    for r in rows:
        write_row(root, r)
    return root, ae_seeds, ar_seeds


def md_table(text: str, title: str) -> list[list[str]]:
    block = text.split(f"## {title}")[1].split("\n\n")[1]
    return [[c.strip() for c in line.strip("|").split("|")] for line in block.splitlines()[2:]]


def test_markdown_cells_marks_and_improvement(results, capsys):
    root, ae_seeds, ar_seeds = results
    assert main(["report", "--results", root]) == 0
    text = capsys.readouterr().out
    t5 = md_table(text, "Table 5: design choices")
    video_n10 = next(r for r in t5 if r[0] == "video" and r[1] == "N@10")
    # columns: local_attn AE, AR, loss_ce AE, AR, Best Improv.
    assert video_n10[2:] == ["0.0400", "**<u>0.0500</u>**", "**<u>0.0450</u>**", "0.0440", "+11.11%"]
    beauty_n10 = next(r for r in t5 if r[0] == "beauty" and r[1] == "N@10")
    assert beauty_n10[4] == "–"  # missing, never 0
    assert beauty_n10[6] == f"{100 * (0.036 - 0.030) / 0.030:+.2f}%"
    t4 = md_table(text, "Table 4: vanilla AE vs AR")
    assert {r[0] for r in t4} == {"video"}  # beauty has no vanilla result: no empty rows
    n10 = next(r for r in t4 if r[0] == "video" and r[1] == "N@10")
    mean_sd = lambda xs: f"{sum(xs) / 3:.4f} ± {stats.tstd(xs):.4f}"  # noqa: E731
    assert n10[2] == mean_sd(ae_seeds) and n10[3] == f"<u>{mean_sd(ar_seeds)}</u>"
    sig = md_table(text, "Paired comparison over seeds (two-sided paired t-test, AR vs AE)")
    n10 = next(r for r in sig if r[2] == "N@10")
    assert n10[6] == f"{stats.ttest_rel(ar_seeds, ae_seeds).pvalue:.4g}" and n10[7] == "3"
    # one verdict per table: Table 4's vanilla never counts among Table 5's design choices
    assert (
        "video, Table 4: AR wins on test N@10: best AR 0.0420 vs best AE 0.0310 (+35.5% AR over AE)" in text
    )
    assert (
        "video, Table 5: AR wins on test N@10: best AR 0.0500 vs best AE 0.0450 (+11.1% AR over AE)" in text
    )
    # beauty's loss_ce has AR only: its best AR cell counts, as in the table's Best Improv., but not in k of n
    assert (
        "beauty, Table 5: AR wins on test N@10: best AR 0.0360 vs best AE 0.0300 (+20.0% AR over AE); "
        "AR ahead in 1 of 1 design choices"
    ) in text
    assert "one side only (not among the design choices counted): loss_ce (no AE result)" in text
    assert "beauty, Table 4" not in text  # no vanilla rows on beauty: no line


def test_latex_is_a_balanced_tabular_and_html_parses(results, tmp_path, capsys):
    root, *_ = results
    out = tmp_path / "rep"
    assert main(["report", "--results", root, "--format", "latex", "--out", str(out)]) == 0
    tex = (out / "report.tex").read_text()
    assert tex.count(r"\begin{tabular}") == tex.count(r"\end{tabular}") == 4  # Tables 4, 5, t-tests, sources
    for block in re.findall(r"\\begin\{tabular\}\{(\w+)\}(.*?)\\end\{tabular\}", tex, re.S):
        cols, body = block
        for line in body.strip().splitlines():
            if line.endswith(r"\\"):
                assert line.count("&") == len(cols) - 1
    assert r"\textbf{\underline{0.0500}}" in tex and "--" in tex
    pngs = sorted(out.glob("*.png"))
    assert len(pngs) >= 4 and all(p.stat().st_size > 1000 for p in pngs)

    assert main(["report", "--results", root, "--format", "html", "--out", str(out)]) == 0

    class Checker(html.parser.HTMLParser):
        def __init__(self):
            super().__init__()
            self.stack, self.tables = [], 0

        def handle_starttag(self, tag, attrs):
            if tag not in ("meta",):
                self.stack.append(tag)
            self.tables += tag == "table"

        def handle_endtag(self, tag):
            assert self.stack.pop() == tag

    checker = Checker()
    checker.feed((out / "report.html").read_text())
    assert checker.tables == 4 and checker.stack == []


def test_csv_and_filters(results, capsys):
    root, *_ = results
    assert main(["report", "--results", root, "--dataset", "beauty", "--format", "csv"]) == 0
    text = capsys.readouterr().out
    assert "beauty" in text and "video" not in text and "Table 4" not in text
    assert main(["report", "--results", root, "--dataset", "nosuch"]) == 2
    assert "no rows for 'nosuch'" in capsys.readouterr().err


@pytest.mark.parametrize("metric", ["bogus", "ndcg", "ndcg@7"])
def test_a_metric_the_rows_do_not_hold_is_refused_with_those_they_do(results, capsys, metric):
    root, *_ = results
    assert main(["report", "--results", root, "--metric", metric]) == 2
    err = capsys.readouterr().err
    assert f"--metric '{metric}' is not a test metric of these rows; pass one they hold: " in err
    assert "ndcg@5, ndcg@10, ndcg@20" in err and "Traceback" not in err
    assert main(["report", "--results", root, "--metric", "recall@20"]) == 0


def test_sources_end_the_report(results, capsys):
    root, *_ = results
    assert main(["report", "--results", root]) == 0
    text = capsys.readouterr().out
    assert text.rstrip().splitlines()[0].startswith("## Table")
    sources = md_table(text, "Sources")
    assert text.index("## Sources") > text.index("## Verdict")
    by_cell = {(r[1], r[2], r[3]): r for r in sources}
    assert by_cell[("video", "vanilla", "AR")][4:] == ["seed re-runs", "sar0 sar1 sar2", "0 1 2"]
    assert by_cell[("video", "loss_ce", "AR")][0] == "loss_ce-video"
    assert by_cell[("video", "loss_ce", "AR")][4:] == ["selected", "a4", "0"]  # a5 is not selected


@pytest.fixture
def two_experiments(tmp_path):
    """The same space on the same data searched twice (experiments A, seed 0 and B, seed 1)."""
    root = str(tmp_path / "results")
    for r in (
        row("ae-a", "synthetic", "quickstart", "ae", 0.30, experiment="A"),
        row("ar-a", "synthetic", "quickstart", "ar", 0.6443, experiment="A"),
        row("ae-b", "synthetic", "quickstart", "ae", 0.32, seed=1, experiment="B"),
        row("ar-b", "synthetic", "quickstart", "ar", 0.6467, seed=1, experiment="B"),
    ):
        write_row(root, r)
    return root


def test_experiments_are_reported_alone_or_side_by_side_never_blended(two_experiments, capsys):
    root = two_experiments
    assert main(["report", "--results", root, "--experiment", "A"]) == 0
    alone = capsys.readouterr().out
    n10 = next(r for r in md_table(alone, "Table 5: design choices") if r[1] == "N@10")
    assert n10[3] == "<u>0.6443</u>"
    assert main(["report", "--results", root]) == 0
    both = capsys.readouterr().out
    assert "0.6455" not in both  # the mean of the two experiments: a blend
    a = next(r for r in md_table(both, "A: Table 5: design choices") if r[1] == "N@10")
    b = next(r for r in md_table(both, "B: Table 5: design choices") if r[1] == "N@10")
    assert a[3] == "<u>0.6443</u>" and b[3] == "<u>0.6467</u>"
    assert "A: synthetic: AR wins" in both and "B: synthetic: AR wins" in both
    sources = md_table(both, "Sources")
    assert sorted((r[0], r[3], r[5], r[6]) for r in sources) == [
        ("A", "AE", "ae-a", "0"),
        ("A", "AR", "ar-a", "0"),
        ("B", "AE", "ae-b", "1"),
        ("B", "AR", "ar-b", "1"),
    ]


def test_an_experiment_under_a_root_one_level_down_is_pointed_to(tmp_path, capsys, monkeypatch):
    # committed rows sit one level below the root a user guesses (results/published/<group>/<experiment>)
    monkeypatch.chdir(tmp_path)
    write_row("results/published/group", row("ar-a", "synthetic", "quickstart", "ar", 0.64, experiment="A"))
    for root in ("results/published", "results"):
        assert main(["report", "--results", root, "--experiment", "A"]) == 2
        err = capsys.readouterr().err
        assert (
            f"--experiment: no rows for 'A' under {root}; results/published/group holds it: "
            "pass that as --results"
        ) in err
    assert main(["report", "--results", "results/published/group", "--experiment", "B"]) == 2
    assert "no rows for 'B' under results/published/group; it holds A" in capsys.readouterr().err
    assert main(["report", "--results", "results/published/group", "--experiment", "A"]) == 0


def test_a_selected_row_without_its_test_figure_or_seeds_without_a_selected_row_are_refused(tmp_path, capsys):
    # a search tests what it selects: a selected row without the figure its cut-offs measure is damaged (or
    # never tested), and would show as "no AR result"; seed re-runs of no selected row re-run nothing known
    ks = {"eval.ks": "[1, 5, 10, 20, 50]"}
    root = str(tmp_path / "untested")
    write_row(root, row("ae", "synthetic", "quickstart", "ae", 0.30, **ks))
    write_row(root, row("ar", "synthetic", "quickstart", "ar", 0.64, **ks, **{"test.ndcg@10": None}))
    assert main(["report", "--results", root]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and (
        "experiment quickstart-synthetic, trial ar: selected, but its test.ndcg@10 is missing" in err[0]
    )
    # a search whose cut-offs leave out 10 never measured it: the cell is empty, rightly
    write_row(
        root, row("ar", "synthetic", "quickstart", "ar", 0.64, **{"eval.ks": "[5, 20]", "test.ndcg@10": None})
    )
    assert main(["report", "--results", root]) == 0
    capsys.readouterr()

    root = str(tmp_path / "orphans")
    write_row(root, row("ae", "synthetic", "quickstart", "ae", 0.30))
    for seed in (0, 1):
        write_row(
            root,
            row(f"s{seed}", "synthetic", "quickstart", "ar", 0.6, seed=seed, role="seed", selected=False),
        )
    assert main(["report", "--results", root]) == 2
    err = capsys.readouterr().err
    assert "experiment quickstart-synthetic has seed re-runs but no selected trial they re-run" in err
    write_row(root, row("ar", "synthetic", "quickstart", "ar", 0.6))
    assert main(["report", "--results", root]) == 0


def test_rows_that_are_not_replicas_are_refused(tmp_path, capsys):
    root = str(tmp_path / "results")
    write_row(root, row("s0", "video", "vanilla", "ar", 0.04, role="seed", selected=False))
    write_row(
        root,
        row(
            "s1",
            "video",
            "vanilla",
            "ar",
            0.05,
            seed=1,
            role="seed",
            selected=False,
            **{"model.num_heads": 2},
        ),
    )
    assert main(["report", "--results", root]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "not replicas" in err[0] and "model.num_heads" in err[0]


def test_two_selected_rows_of_one_task_are_refused(tmp_path, capsys):
    root = str(tmp_path / "results")
    write_row(root, row("t1", "video", "vanilla", "ar", 0.04))
    write_row(root, row("t2", "video", "vanilla", "ar", 0.05))
    assert main(["report", "--results", root]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "2 selected rows (t1, t2)" in err[0]


def test_verdict_states_the_fraction_of_a_planted_optimum(tmp_path, capsys):
    root = str(tmp_path / "results")
    known = {
        "dataset_optimum": json.dumps({"ndcg@10": 0.8}),
        "eval.filter_seen": "none",
        "eval.sampled_negatives": 0,
    }
    write_row(
        root,
        row("ae", "synthetic", "quickstart", "ae", 0.40, best_epoch=60, **{"train.max_epochs": 60}, **known),
    )
    write_row(
        root,
        row("ar", "synthetic", "quickstart", "ar", 0.60, best_epoch=40, **{"train.max_epochs": 60}, **known),
    )
    assert main(["report", "--results", root]) == 0
    verdict = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("- synthetic:"))
    assert verdict.endswith(
        "of the Bayes-optimal 0.8000, best AR reaches 75% and best AE 50%; still improving "
        "at the last epoch of its budget: AE (60 of 60 epochs), so more epochs may change this verdict"
    )
    write_row(
        root, row("ar", "synthetic", "quickstart", "ar", 0.60, **{**known, "eval.filter_seen": "history"})
    )
    assert main(["report", "--results", root]) == 0  # the optimum holds for unfiltered ranking only
    assert "Bayes-optimal" not in capsys.readouterr().out


def test_experiments_ranked_differently_do_not_share_a_table(tmp_path, capsys):
    root = str(tmp_path / "results")
    for trial, space, task, value, policy in (
        ("a1", "loss_ce", "ae", 0.30, "none"),
        ("a2", "loss_ce", "ar", 0.40, "none"),
        ("c1", "local_attn", "ae", 0.20, "history"),
        ("c2", "local_attn", "ar", 0.90, "history"),
    ):
        write_row(root, row(trial, "video", space, task, value, **{"eval.filter_seen": policy}))
    assert main(["report", "--results", root]) == 0
    text = capsys.readouterr().out
    assert "local_attn-video: Table 5" in text and "loss_ce-video: Table 5" in text
    assert (
        "each experiment is reported on its own: on video they differ in eval.filter_seen "
        "(local_attn-video: history; loss_ce-video: none)"
    ) in text
    assert "+125.00%" not in text  # best AR of one protocol over best AE of the other: never computed


def test_failed_seed_reruns_are_marked_not_hidden(tmp_path, capsys):
    root = str(tmp_path / "results")
    write_row(root, row("ae", "video", "vanilla", "ae", 0.30))
    write_row(root, row("ar", "video", "vanilla", "ar", 0.40))
    for s, status in enumerate(("finished", "diverged", "finished")):
        write_row(root, row(f"sae{s}", "video", "vanilla", "ae", 0.30, seed=s, role="seed", selected=False))
        write_row(
            root,
            row(
                f"sar{s}",
                "video",
                "vanilla",
                "ar",
                0.50 if status == "finished" else None,
                seed=s,
                role="seed",
                selected=False,
                status=status,
            ),
        )
    assert main(["report", "--results", root]) == 0
    text = capsys.readouterr().out
    n10 = next(r for r in md_table(text, "Table 4: vanilla AE vs AR") if r[1] == "N@10")
    assert n10[3] == "<u>0.5000 ± 0.0000 †</u>"
    assert (
        "2 to 3 seed(s) per cell" in text  # AR 2 values, AE 3: never the larger count alone
        and "| 2 shared (AE 3, AR 2) |" in text  # the paired test's n, beside means over each side's seeds
        and "seed re-runs that diverged or failed have no value in their cell: vanilla AR 1 of 3" in text
    )
    sources = {r[3]: r for r in md_table(text, "Sources")}
    assert (
        sources["AR"][4] == "seed re-runs; no value (diverged or failed): sar1" and sources["AR"][6] == "0 2"
    )


def test_equal_differences_over_seeds_have_no_p_value(tmp_path, capsys):
    """AR ahead by the same amount on each seed: the differences have no spread, t is undefined; the table
    once printed p 0."""
    root = str(tmp_path / "results")
    write_row(root, row("ae", "video", "vanilla", "ae", 0.30))
    write_row(root, row("ar", "video", "vanilla", "ar", 0.40))
    for s in (0, 1):
        write_row(
            root, row(f"sae{s}", "video", "vanilla", "ae", 0.30 + s / 10, seed=s, role="seed", selected=False)
        )
        write_row(
            root, row(f"sar{s}", "video", "vanilla", "ar", 0.40 + s / 10, seed=s, role="seed", selected=False)
        )
    assert main(["report", "--results", root]) == 0
    paired = md_table(
        capsys.readouterr().out, "Paired comparison over seeds (two-sided paired t-test, AR vs AE)"
    )
    n10 = next(r for r in paired if r[2] == "N@10")
    assert n10[6:] == ["– (equal differences)", "2"], n10


@pytest.mark.parametrize("value", [float("inf"), 1.5, -0.1])
def test_a_metric_no_ranking_can_have_is_refused_naming_its_row(tmp_path, capsys, value):
    """A damaged or edited row (test N@10 inf) once gave "best AE inf (+nan%)": one line naming the row."""
    root = str(tmp_path / "results")
    write_row(root, row("ae", "video", "vanilla", "ae", value))
    write_row(root, row("ar", "video", "vanilla", "ar", 0.40))
    assert main(["report", "--results", root]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "experiment vanilla-video, trial ae: test." in err, err
    assert f"test.ndcg@10 is {value}, which no ranking metric can be (they lie in [0, 1])" in err, err


def test_a_side_whose_seed_reruns_all_failed_has_no_value_never_nan(tmp_path, capsys):
    root = str(tmp_path / "results")
    write_row(root, row("ae", "video", "vanilla", "ae", 0.30))
    write_row(root, row("ar", "video", "vanilla", "ar", 0.40))
    for s in range(3):
        write_row(root, row(f"sae{s}", "video", "vanilla", "ae", 0.30, seed=s, role="seed", selected=False))
        write_row(
            root,
            row(
                f"sar{s}", "video", "vanilla", "ar", None, seed=s, role="seed", selected=False, status="error"
            ),
        )
    assert main(["report", "--results", root]) == 0
    text = capsys.readouterr().out
    assert "nan" not in text.lower()
    n10 = next(r for r in md_table(text, "Table 4: vanilla AE vs AR") if r[1] == "N@10")
    assert n10[3] == "– †"
    assert (
        "video: no verdict on test N@10: no AR result; one side only (not among the design choices "
        "counted): vanilla (no AR result); † seed re-runs that diverged or failed have no value in their "
        "cell: vanilla AR 3 of 3"
    ) in text


def test_tables_5_and_6_get_a_verdict_each_never_a_best_across_them(tmp_path, capsys):
    root = str(tmp_path / "results")
    for trial, space, task, value in (
        ("l1", "local_attn", "ae", 0.30),
        ("l2", "local_attn", "ar", 0.40),
        ("h1", "hf_albert", "ae", 0.50),  # Table 6's AE beats every Table 5 cell
        ("h2", "hf_albert", "ar", 0.45),
    ):
        write_row(root, row(trial, "beauty", space, task, value))
    assert main(["report", "--results", root]) == 0
    text = capsys.readouterr().out
    assert (
        "beauty, Table 5: AR wins on test N@10: best AR 0.4000 vs best AE 0.3000 (+33.3% AR over AE)" in text
    )
    assert (
        "beauty, Table 6: AE wins on test N@10: best AR 0.4500 vs best AE 0.5000 (-10.0% AR over AE); "
        "AR ahead in 0 of 1 backbones;" in text
    )
    assert "AR ahead in 1 of 1 design choices;" in text  # Table 5's line counts design choices
    assert "best AR 0.4500 vs best AE 0.3000" not in text and "best AR 0.4000 vs best AE 0.5000" not in text


def test_seed_reruns_of_another_config_than_the_selected_are_refused(tmp_path, capsys):
    root = str(tmp_path / "results")
    write_row(
        root, row("ar", "video", "vanilla", "ar", 0.40, **{"train.lr": 0.01})
    )  # selected after a resume
    for s in range(2):  # re-runs of the earlier winner (lr 0.003)
        write_row(
            root,
            row(
                f"sar{s}",
                "video",
                "vanilla",
                "ar",
                0.5,
                seed=s,
                role="seed",
                selected=False,
                **{"train.lr": 0.003},
            ),
        )
    assert main(["report", "--results", root]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "not of its selected configuration (they differ in train.lr)" in err[0]


def test_seed_reruns_given_the_asha_budget_of_their_selected_trial_form_its_cell(tmp_path, capsys):
    """ASHA stopped the selected trial through Tune (its row: train.max_steps 0, 14,000 steps trained); its
    re-runs stop at the same step through train.max_steps 18,000: one configuration. Re-runs with two
    budgets are not replicas, nor are re-runs given fewer steps than the trial trained."""
    root = str(tmp_path / "results")
    trained = {"steps": 14000, "steps_per_epoch": 176.0, "train.eval_every": 5}
    write_row(root, row("ar", "beauty", "local_attn", "ar", 0.40, **{"train.max_steps": 0}, **trained))

    def reruns(*budgets: int) -> None:
        for s, budget in enumerate(budgets):
            write_row(
                root,
                row(
                    f"sar{s}",
                    "beauty",
                    "local_attn",
                    "ar",
                    0.4 + s / 10,
                    seed=s,
                    role="seed",
                    selected=False,
                    **{"train.max_steps": budget},
                    **trained,
                ),
            )

    reruns(18000, 18000)
    assert main(["report", "--results", root]) == 0
    n10 = next(r for r in md_table(capsys.readouterr().out, "Table 5: design choices") if r[1] == "N@10")
    assert n10[3].startswith("0.4500 ± 0.0707")
    for budgets in ((18000, 9000), (9000, 9000), (100, 100)):
        reruns(*budgets)
        assert main(["report", "--results", root]) == 2
        assert "they differ in train.max_steps" in capsys.readouterr().err
    reruns(13500, 13500)  # less than a pass (5 x 176 steps) short: token batches vary by a step or two
    assert main(["report", "--results", root]) == 0


def test_the_sampling_seed_matters_only_where_negatives_were_sampled(tmp_path, capsys):
    root = str(tmp_path / "results")
    for trial, space, task, seed in (
        ("a1", "loss_ce", "ae", 1),
        ("a2", "loss_ce", "ar", 1),
        ("c1", "local_attn", "ae", 2),
        ("c2", "local_attn", "ar", 2),
    ):
        write_row(
            root,
            row(trial, "video", space, task, 0.3, **{"eval.sampled_negatives": 0, "eval.sample_seed": seed}),
        )
    assert main(["report", "--results", root]) == 0
    assert "reported on its own" not in capsys.readouterr().out  # full ranking: one Table 5


def test_generated_data_of_two_generator_versions_has_two_hashes():
    from modsar.config import Config
    from modsar.records.rows import result_row

    def sha(version: int) -> str:
        manifest = {
            "sources": [{"generator": "modsar.data.synthetic", "version": version, "format": "synthetic"}]
        }
        return result_row(
            Config(), experiment="e", trial_id="t", status="finished", dataset_manifest=manifest
        )["dataset_sha256"]

    assert sha(1).startswith("generated:") and sha(1) != sha(2) and sha(2) == sha(2)


def test_a_space_of_models_is_one_row_per_model(tmp_path, capsys):
    """residual_models varies the backbone: each model's selected row is its own cell, named as in the
    residual-dominance paper, in its order, the best of a column bold; the AE/AR tables leave it out."""
    root = str(tmp_path / "results")
    models = [
        ("m1", "ar", "modular", 0.050),
        ("m2", "ar", "duorec", 0.055),
        ("m3", "ar", "bsarec", 0.061),
        ("m4", "ae", "modular", 0.040),
        ("m5", "ar", "gru4rec", 0.030),
    ]
    for trial, task, backbone, value in models:
        write_row(root, row(trial, "toys", "residual_models", task, value, **{"model.backbone": backbone}))
    write_row(root, row("v1", "toys", "vanilla", "ae", 0.02, **{"model.backbone": "modular"}))
    write_row(root, row("v2", "toys", "vanilla", "ar", 0.03, **{"model.backbone": "modular"}))
    assert main(["report", "--results", root]) == 0
    text = capsys.readouterr().out
    table = md_table(text, "residual_models: one row per model")
    assert [(r[1], r[6]) for r in table] == [
        ("SASRec", "0.0500"),
        ("DuoRec", "0.0550"),
        ("BSARec", "**0.0610**"),
        ("BERT4Rec", "0.0400"),
        ("GRU4Rec", "0.0300"),
    ]
    assert "toys / residual_models: BSARec leads on test N@10 (0.0610)" in text
    t4 = md_table(text, "Table 4: vanilla AE vs AR")
    assert [r[2:4] for r in t4 if r[1] == "N@10"] == [["0.0200", "<u>0.0300</u>"]]


def test_a_temporal_split_is_stated_and_never_blended_with_leave_one_out(tmp_path, capsys):
    root = str(tmp_path / "results")
    temporal = {
        "data.split": "temporal",
        "data.split_valid": 0.8,
        "data.split_test": 0.9,
        "data.split_dates": "",
        "data.split_targets": "first",
        "data.view": "user",
    }
    loo = {**temporal, "data.split": "loo"}
    write_row(root, row("t1", "ml-100k", "vanilla", "ae", 0.02, experiment="time", **temporal))
    write_row(root, row("t2", "ml-100k", "vanilla", "ar", 0.03, experiment="time", **temporal))
    write_row(root, row("l1", "ml-100k", "local_attn", "ae", 0.04, experiment="loo", **loo))
    write_row(root, row("l2", "ml-100k", "local_attn", "ar", 0.05, experiment="loo", **loo))
    assert main(["report", "--results", root]) == 0
    text = capsys.readouterr().out
    assert "each experiment is reported on its own: on ml-100k they differ in data.split" in text
    assert (
        "time: protocol: data.split=temporal (one global cut at timestamp quantiles 0.8 / 0.9; targets: "
        "first event(s) after each cut per user)"
    ) in text
    # rows that record their cut times and target counts (every row since they exist) show them
    facts = {
        "split_valid_cut": 946684800.0,
        "split_test_cut": 978307200.0,
        "valid_targets": 197,
        "test_targets": 166,
    }
    write_row(root, row("t3", "ml-100k", "vanilla", "ae", 0.02, experiment="dated", **temporal, **facts))
    write_row(root, row("t4", "ml-100k", "vanilla", "ar", 0.03, experiment="dated", **temporal, **facts))
    assert main(["report", "--results", root, "--experiment", "dated"]) == 0
    assert (
        "protocol: data.split=temporal (one global cut at timestamp quantiles 0.8 / 0.9 = 2000-01-01 / "
        "2001-01-01; targets: first event(s) after each cut per user; 197 validation / 166 test targets)"
    ) in capsys.readouterr().out


def test_rows_from_before_the_split_keys_read_as_leave_one_out(tmp_path, capsys):
    """A row written before data.view/data.split existed shares tables with a new leave-one-out row."""
    root = str(tmp_path / "results")
    new = {
        "data.split": "loo",
        "data.view": "user",
        "data.split_valid": 0.8,
        "data.split_test": 0.9,
        "data.split_dates": "",
        "data.split_targets": "first",
    }
    write_row(root, row("o1", "video", "local_attn", "ae", 0.04, experiment="old"))
    write_row(root, row("o2", "video", "local_attn", "ar", 0.05, experiment="old"))
    write_row(root, row("n1", "video", "loss_ce", "ae", 0.045, experiment="new", **new))
    write_row(root, row("n2", "video", "loss_ce", "ar", 0.044, experiment="new", **new))
    assert main(["report", "--results", root]) == 0
    text = capsys.readouterr().out
    assert "reported on its own" not in text and "protocol:" not in text
    t5 = md_table(text, "Table 5: design choices")
    assert [r[2:6] for r in t5 if r[0] == "video" and r[1] == "N@10"] == [
        ["0.0400", "**<u>0.0500</u>**", "**<u>0.0450</u>**", "0.0440"]
    ]


def test_the_verdict_names_models_that_never_left_the_popularity_level(tmp_path, capsys):
    """AE's selected trial never reached 1.25x the most-popular ranking on validation (escape_steps empty),
    AR's did: the report names the AE cell, with its best validation value beside the popularity level."""
    root = str(tmp_path / "results")
    write_row(
        root,
        row(
            "p1",
            "ml",
            "vanilla",
            "ae",
            0.020,
            popularity_level=0.0190,
            escape_steps=None,
            **{"train.monitor": "ndcg@10"},
        ),
    )
    write_row(
        root,
        row(
            "p2",
            "ml",
            "vanilla",
            "ar",
            0.060,
            popularity_level=0.0190,
            escape_steps=480,
            **{"train.monitor": "ndcg@10"},
        ),
    )
    assert main(["report", "--results", root]) == 0
    text = capsys.readouterr().out
    line = next(line for line in text.splitlines() if "popularity plateau" in line)
    assert "ml / vanilla / AE (1 of 1 runs; best valid N@10 0.0200 vs most-popular 0.0190)" in line
    assert "/ AR" not in line
    write_row(
        root,
        row(
            "p3",
            "ml",
            "vanilla",
            "ae",
            0.020,
            selected=False,
            popularity_level=0.0190,
            escape_steps=None,
            **{"train.monitor": "ndcg@10"},
        ),
    )  # not behind a cell: not named
    assert main(["report", "--results", root]) == 0 and "(1 of 1 runs" in capsys.readouterr().out


def test_a_cell_tested_after_training_again_says_so_when_its_validation_moved():
    import pandas as pd

    from modsar.report.cells import Cell
    from modsar.report.verdicts import retrained_line

    rows = pd.DataFrame(
        {
            "trial_id": ["a", "b", "c"],
            "train.monitor": ["ndcg@10"] * 3,
            "valid.ndcg@10": [0.067453, 0.069332, 0.05],
            "test_from": ["retrained", "retrained", "checkpoint"],
            "test_from_valid": [0.065801, 0.069332, None],
        }
    )
    cells = {
        ("ml-100k", "local_attn", "ae"): Cell(values={1: 0.056}, trials=["a"]),
        ("ml-100k", "local_attn", "ar"): Cell(values={1: 0.063}, trials=["b"]),  # the same value: the trial's
        ("beauty", "local_attn", "ae"): Cell(values={0: 0.04}, trials=["c"]),  # tested from its checkpoint
    }
    line = retrained_line(rows, cells)
    assert line is not None and line.startswith(
        "tested after training again: ml-100k / local_attn / AE (trial a: valid N@10 0.0658 retrained, "
        "0.0675 when selected): "
    )
    assert "/ AR" not in line and "beauty" not in line
    assert retrained_line(rows.assign(test_from_valid=rows["valid.ndcg@10"]), cells) is None
    assert retrained_line(rows.drop(columns=["test_from", "test_from_valid"]), cells) is None  # older rows


@pytest.mark.parametrize("value", [float("nan"), float("inf")])
def test_a_selected_row_without_a_validation_score_is_refused(tmp_path, capsys, value):
    """A selected row whose validation N@10 is NaN (edited or damaged) cannot have been selected by
    validation; its test figure once stood in the cell as if it had been."""
    root = str(tmp_path / "results")
    write_row(root, {**row("ae", "video", "vanilla", "ae", 0.30), "valid.ndcg@10": value})
    write_row(root, row("ar", "video", "vanilla", "ar", 0.40))
    assert main(["report", "--results", root]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert "experiment vanilla-video, trial ae: selected, but its valid.ndcg@10 is" in err, err
    assert "validation cannot have selected it" in err, err
