"""`modsar evaluate`: a saved checkpoint scored again equals its row, for every kind of model ModSAR writes;
another protocol is said so; bad input is one clear line."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from modsar.cli import main
from modsar.records.rows import read_rows

TINY = [
    "model.hidden_size=16",
    "model.num_layers=1",
    "train.max_epochs=2",
    "train.patience=0",
    "train.threads=1",
]
KINDS = {  # one of each: the modular AE and AR, the zoo, the HF plugins
    "modular-ar": [],
    "modular-ae": ["task=ae"],
    "gru4rec": ["model.backbone=gru4rec"],
    "duorec": ["model.backbone=duorec"],
    "bsarec": ["model.backbone=bsarec"],
    "albert": ["model.backbone=albert", "model.num_heads=2", "model.dropout=0.1"],
    "llama": ["model.backbone=llama", "model.num_heads=2", "model.dropout=0"],
    "transfo_xl": ["model.backbone=transfo_xl", "model.num_heads=2", "model.activation=relu"],
}


def train(
    tmp_path: Path, capsys, *overrides: str, dataset: str = "synthetic", data_dir: Path | None = None
) -> dict:
    """`modsar train --json`: the row it wrote (with its checkpoint)."""
    where = ["--data-dir", str(data_dir)] if data_dir else []
    capsys.readouterr()
    assert (
        main(
            [
                "train",
                "--dataset",
                dataset,
                *TINY,
                *overrides,
                "--results",
                str(tmp_path / "results"),
                "--quiet",
                "--json",
                *where,
            ]
        )
        == 0
    )
    row = json.loads(capsys.readouterr().out)
    assert Path(row["checkpoint"]).is_file()
    return row


def evaluate(capsys, *args: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(["evaluate", *args])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("kind", KINDS)
def test_a_checkpoint_scored_again_equals_its_row_to_the_last_digit(kind, tmp_path, capsys):
    row = train(tmp_path, capsys, *KINDS[kind])
    code, out, _ = evaluate(capsys, "--checkpoint", row["checkpoint"], "--json")
    scores = json.loads(out)
    assert (
        code == 0
        and scores["row"] == row["trial_id"]
        and scores["comparable"]
        and not scores["protocol_changed"]
    )
    tested = {k.removeprefix("test."): v for k, v in row.items() if k.startswith("test.")}
    assert len(tested) == 15 and scores["metrics"] == tested  # exactly: the same evaluator on the same split
    assert scores["row_differences"] == {}


def test_the_text_output_says_what_was_scored_and_that_it_equals_the_row(tmp_path, capsys):
    row = train(tmp_path, capsys, "task=ae")
    code, out, _ = evaluate(capsys, "--checkpoint", row["checkpoint"], "--split", "valid")
    assert code == 0
    assert out.splitlines()[0].startswith(f"AE (modular) on synthetic, {row['checkpoint']} (best epoch ")
    assert "valid, ranking: full, filter_seen=none, cpu" in out.splitlines()[0]
    assert f"{row['valid.ndcg@10']:.4f}" in out.splitlines()[2]  # the valid line of the table
    assert out.splitlines()[-1] == f"row {row['trial_id']}: equal to its valid.* values to the last digit"


def test_another_protocol_is_named_and_not_held_to_the_row(tmp_path, capsys):
    row = train(tmp_path, capsys)
    code, out, _ = evaluate(
        capsys, "--checkpoint", row["checkpoint"], "--filter-seen", "history", "--ks", "1,10"
    )
    assert code == 0
    assert (
        "protocol: not the one this checkpoint's run was selected and tested under: eval.ks=[1, 10] (stored: "
        "[1, 5, 10, 20, 50]), eval.filter_seen=history (stored: none)"
    ) in out
    assert f"row {row['trial_id']}: not compared" in out
    header = out.splitlines()[1].split()
    assert header == ["split", "recall@1", "recall@10", "ndcg@1", "ndcg@10", "mrr@1", "mrr@10"]
    # cut-offs alone change nothing that is shown: still held to the row, and said so in one consistent way
    code, out, _ = evaluate(capsys, "--checkpoint", row["checkpoint"], "--ks", "10", "--json")
    scores = json.loads(out)
    assert scores["comparable"] and scores["metrics"] == {
        f"{m}@10": row[f"test.{m}@10"] for m in ("recall", "ndcg", "mrr")
    }
    code, out, _ = evaluate(
        capsys, "--checkpoint", row["checkpoint"], "--ks", "5,20"
    )  # without the monitor's 10
    assert (
        code == 0
        and "protocol: the stored one, at other cut-offs: eval.ks=[5, 20] (stored: [1, 5, 10, 20, 50])" in out
    )
    assert "not comparable" not in out and out.splitlines()[-1].endswith(
        "equal to its test.* values to the last digit"
    )
    # sampled negatives: 100 fixed negatives per target, so recall@10 can only rise
    code, out, _ = evaluate(capsys, "--checkpoint", row["checkpoint"], "--sampled-negatives", "100", "--json")
    scores = json.loads(out)
    assert not scores["comparable"] and scores["protocol_changed"] == {
        "eval.sampled_negatives": {"stored": 0, "used": 100}
    }
    assert scores["metrics"]["recall@10"] >= row["test.recall@10"]


def test_a_moved_checkpoint_is_scored_without_a_row(tmp_path, capsys):
    row = train(tmp_path, capsys)
    moved = tmp_path / "elsewhere.pt"
    Path(row["checkpoint"]).rename(moved)
    code, out, _ = evaluate(capsys, "--checkpoint", str(moved))
    assert code == 0 and "row: none found beside the checkpoint" in out
    assert f"{row['test.ndcg@10']:.4f}" in out


def test_a_timed_model_is_scored_with_its_times(tmp_path, capsys):
    """model.time_bias reads the windows' timestamps: scored again, it equals its row (and so its times were
    given, as in training: the timed tests of test_time_bias show the scores depend on them)."""
    from modsar.data.store import prepare_dataset

    rng = np.random.default_rng(0)
    lines = ["userId,movieId,rating,timestamp"]
    for user in range(1, 41):
        t = 1.6e9 + rng.integers(0, 1e6)
        for _ in range(int(rng.integers(4, 12))):
            t += rng.integers(10, 100_000)
            lines.append(f"{user},{rng.integers(1, 31)},4,{int(t)}")
    (tmp_path / "ratings.csv").write_text("\n".join(lines) + "\n")
    data = tmp_path / "data"
    prepare_dataset("timed", sources=[tmp_path / "ratings.csv"], fmt="ml-csv", root=data)
    row = train(
        tmp_path, capsys, "model.time_bias=session", "model.num_heads=2", dataset="timed", data_dir=data
    )
    code, out, _ = evaluate(capsys, "--checkpoint", row["checkpoint"], "--data-dir", str(data), "--json")
    scores = json.loads(out)
    assert code == 0 and scores["metrics"] == {
        k.removeprefix("test."): v for k, v in row.items() if k.startswith("test.")
    }


@pytest.mark.parametrize(
    ("make", "args", "message"),
    [
        (None, ["--checkpoint", "{tmp}/nope.pt"], "checkpoint '{tmp}/nope.pt' does not exist"),
        (
            "text",
            ["--checkpoint", "{tmp}/notes.pt"],
            "{tmp}/notes.pt: not a ModSAR checkpoint (UnpicklingError)",
        ),
        (
            "row",
            ["--checkpoint", "{ckpt}", "--ks", "1,x"],
            "--ks '1,x' is not a comma-separated list of cut-offs",
        ),
        ("row", ["--checkpoint", "{ckpt}", "--ks", "0,10"], "--ks '0,10': every cut-off must be >= 1"),
        (
            "row",
            ["--checkpoint", "{ckpt}", "--sampled-negatives", "100000"],
            "'eval.sampled_negatives' (100000) must be below the number of items",
        ),
        (
            "edited",
            ["--checkpoint", "{ckpt}"],
            "its weights do not fit the model its stored config and sizes build (size mismatch for ",
        ),
        (
            "resized",
            ["--checkpoint", "{ckpt}", "--data-dir", "{tmp}/data"],
            "was trained on 'mine' with 20 items and 30 "
            "users; the 'mine' prepared here has 21 and 30: prepare it from the same source",
        ),
        (
            "reordered",
            ["--checkpoint", "{ckpt}", "--data-dir", "{tmp}/data"],
            "was trained on another 'mine' than the "
            "one prepared here (its sources differ, with the same numbers of items and users)",
        ),
        (None, ["--checkpoint", "foo://x"], "checkpoint 'foo://x': "),
        ("folder", ["--checkpoint", "{tmp}/folder"], "checkpoint folder '{tmp}/folder' holds no best.pt"),
        ("trial", ["--checkpoint", "{tmp}/trial"], "(a trial's folder: pass one of its checkpoint_000002)"),
        (
            "resume",
            ["--checkpoint", "{tmp}/resume.pt"],
            "(a search's resume state: pass the best.pt beside it)",
        ),
        ("number", ["--checkpoint", "{tmp}/five.pt"], "not a ModSAR checkpoint (it holds a int)"),
        ("sizes", ["--checkpoint", "{ckpt}"], "a damaged ModSAR checkpoint (num_items=-5)"),
        ("config", ["--checkpoint", "{ckpt}"], "a damaged ModSAR checkpoint (its config: AttributeError"),
        ("row", ["--checkpoint", "{ckpt}", "--ks", "10,10"], "--ks '10,10' names a cut-off twice"),
        ("row", ["--checkpoint", "{ckpt}", "--ks", ""], "--ks '' is not a comma-separated list of cut-offs"),
    ],
)
def test_bad_input_is_one_clear_line(make, args, message, tmp_path, capsys, monkeypatch):
    ckpt = ""
    if make == "text":
        (tmp_path / "notes.pt").write_text("not a checkpoint")
    elif make == "folder":
        (tmp_path / "folder").mkdir()
    elif make == "trial":  # a search trial's folder, above its checkpoint folders
        (tmp_path / "trial" / "checkpoint_000002").mkdir(parents=True)
        torch.save({"state_dict": {}}, tmp_path / "trial" / "checkpoint_000002" / "best.pt")
    elif make == "resume":
        torch.save({"optimizer": {}, "history": []}, tmp_path / "resume.pt")
    elif make == "number":
        torch.save(5, tmp_path / "five.pt")
    elif make in ("row", "edited", "sizes", "config"):
        ckpt = train(tmp_path, capsys)["checkpoint"]
    if make in ("sizes", "config"):  # a size no model has; a config section that is no mapping
        payload = torch.load(ckpt, weights_only=True)
        if make == "sizes":
            payload["num_items"] = -5
        else:
            payload["config"]["model"] = 3
        torch.save(payload, ckpt)
    if make == "edited":  # sizes that the stored weights do not have
        payload = torch.load(ckpt, weights_only=True)
        payload["num_items"] += 1
        torch.save(payload, ckpt)
    if make == "reordered":  # the same pairs, each user's items in another order: same sizes, other data
        from modsar.data.store import prepare_dataset

        pairs = [f"{u} {1 + (u * 7 + k) % 20}" for u in range(1, 31) for k in range(5)]
        (tmp_path / "mine.txt").write_text("\n".join(pairs) + "\n")
        prepare_dataset("mine", sources=[tmp_path / "mine.txt"], root=tmp_path / "data")
        ckpt = train(tmp_path, capsys, dataset="mine", data_dir=tmp_path / "data")["checkpoint"]
        backwards = [f"{u} {1 + (u * 7 + k) % 20}" for u in range(1, 31) for k in reversed(range(5))]
        (tmp_path / "mine.txt").write_text("\n".join(backwards) + "\n")
        prepare_dataset("mine", sources=[tmp_path / "mine.txt"], root=tmp_path / "data", force=True)
    if make == "resized":  # trained on 20 items; the dataset is prepared again from a file with a 21st
        from modsar.data.store import prepare_dataset

        pairs = [f"{u} {1 + (u * 7 + k) % 20}" for u in range(1, 31) for k in range(5)]
        (tmp_path / "mine.txt").write_text("\n".join(pairs) + "\n")
        prepare_dataset("mine", sources=[tmp_path / "mine.txt"], root=tmp_path / "data")
        ckpt = train(tmp_path, capsys, dataset="mine", data_dir=tmp_path / "data")["checkpoint"]
        (tmp_path / "mine.txt").write_text("\n".join([*pairs, "1 21"]) + "\n")
        prepare_dataset("mine", sources=[tmp_path / "mine.txt"], root=tmp_path / "data", force=True)
    fill = {"tmp": str(tmp_path), "ckpt": ckpt}
    code, _, err = evaluate(capsys, *[a.format(**fill) for a in args])
    assert code == 2 and message.format(**fill) in err and len(err.strip().splitlines()) == 1, err


def test_a_search_trials_checkpoint_folder_is_found_and_matches(tmp_path, capsys):
    """A search row's `checkpoint` is a folder holding best.pt; given that folder, evaluate reads the file and
    finds the row above it (<results>/<experiment>/trials)."""
    from modsar.records.rows import write_row

    row = train(tmp_path, capsys)
    experiment = Path(row["checkpoint"]).parent.parent
    folder = experiment / "ray-ar" / "trial_0" / "checkpoint_000001"
    folder.mkdir(parents=True)
    Path(row["checkpoint"]).rename(folder / "best.pt")
    write_row(str(experiment.parent), {**row, "checkpoint": str(folder)})
    assert read_rows(str(experiment.parent), experiment.name)["checkpoint"].tolist() == [str(folder)]
    code, out, _ = evaluate(capsys, "--checkpoint", str(folder))
    assert (
        code == 0
        and out.splitlines()[-1] == f"row {row['trial_id']}: equal to its test.* values to the last digit"
    )


def test_a_row_without_test_values_is_said_so_not_called_different(tmp_path, capsys):
    """A search tests only the trials it selects: the others' rows hold no test.* (NaN beside the selected
    ones). Scoring such a trial's checkpoint says so; it never reports 'differs' against a missing value."""
    from modsar.records.rows import write_row

    row = train(tmp_path, capsys)
    root = Path(row["checkpoint"]).parent.parent.parent
    write_row(str(root), {**row, "role": "search", **{k: None for k in row if k.startswith("test.")}})
    write_row(
        str(root), {**row, "trial_id": "another", "checkpoint": None, "selected": True}
    )  # one that was tested
    code, out, _ = evaluate(capsys, "--checkpoint", row["checkpoint"])
    assert code == 0 and out.splitlines()[-1] == (
        f"row {row['trial_id']}: it holds no test.* values (a search tests only the trials it selects)"
    )
    code, out, _ = evaluate(capsys, "--checkpoint", row["checkpoint"], "--json")
    assert json.loads(out)["row_differences"] == {}
