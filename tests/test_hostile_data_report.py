"""Issue 39: silent wrong results in data import and in results, report and analyze. Each hostile input gets a
known answer: the right reading, or one error line that names the file and line, a non-zero exit, and nothing
written."""

from __future__ import annotations

import argparse
import gzip
import json
import re

import numpy as np
import pandas as pd
import pytest
from conftest import write
from test_report import row as report_row

from modsar.cli import main
from modsar.config import Config, load_config
from modsar.data.importers import read_interactions, resolve_format
from modsar.data.store import load_dataset, prepare_dataset
from modsar.errors import ModsarError
from modsar.records.rows import matching_rows, result_row, write_row


def _user_lines(users, items_per_user=16, first_item=101, catalogue=30, seed=0) -> str:
    """One line per user: its id, then `items_per_user` items of `catalogue` (ids from first_item)."""
    rng = np.random.default_rng(seed)
    return "".join(
        f"{u} "
        + " ".join(str(first_item + int(i)) for i in rng.integers(0, catalogue, items_per_user))
        + "\n"
        for u in users
    )


def _prepare(capsys, *args) -> tuple[int, list[str], list[str]]:
    code = main(["data", "prepare", *args])
    captured = capsys.readouterr()
    return code, captured.out.splitlines(), captured.err.strip().splitlines()


def _refused(capsys, root, name, *args) -> str:
    """`data prepare NAME ARGS` exits 2 with one error line, prints nothing on stdout and stores nothing."""
    code, out, err = _prepare(capsys, name, *args)
    assert code == 2 and out == [] and len(err) == 1 and err[0].startswith("modsar: error:"), (out, err)
    assert not (root / name).exists() and not list(root.glob(f".staging-{name}-*"))
    return err[0]


# ---- the format comes from the content, and is said ----


@pytest.mark.parametrize("order", ["increasing", "shuffled"])
def test_a_user_per_line_file_named_sessions_is_read_as_user_lines(tmp_path, capsys, order):
    """30 users x 16 items over 30 items: as sessions it would be 30 more 'items' (the user ids) and 510
    interactions; the first column is a user id column (increasing, or never among the items)."""
    users = (
        list(range(1, 31))
        if order == "increasing"
        else [int(u) for u in np.random.default_rng(1).permutation(30) + 1]
    )
    src = write(tmp_path / "user_sessions.txt", _user_lines(users))
    code, out, err = _prepare(capsys, "mine", "--source", str(src))
    assert code == 0 and err == []
    assert out[0].startswith(f"read {src} as user-lines (") and out[0].endswith(")")
    if order == "shuffled":
        assert "not sessions, as the name suggests: pass --format sessions" in out[0]
    manifest = json.loads((tmp_path / "datasets" / "mine" / "manifest.json").read_text())
    assert manifest["statistics"]["users"] == 30 and manifest["statistics"]["interactions"] == 480
    assert manifest["statistics"]["items"] <= 30 and manifest["sources"][0]["format"] == "user-lines"


def test_the_format_line_goes_to_stderr_with_json(tmp_path, capsys):
    src = write(tmp_path / "log.txt", "1 10\n1 11\n1 12\n1 13\n2 10\n2 11\n2 12\n")
    code, out, err = _prepare(capsys, "mine", "--source", str(src), "--json")
    assert code == 0 and json.loads("\n".join(out))["sources"][0]["format"] == "pairs"
    assert err == [
        f"read {src} as pairs (2 ids per line and the first ids repeat: one (user, item) per line)"
    ]
    code, out, _ = _prepare(capsys, "mine", "--source", str(src), "--format", "pairs")
    assert out[0] == f"read {src} as pairs (--format)" and "already prepared (reused)" in out[1]


@pytest.mark.parametrize(
    ("name", "text", "fmt"),
    [
        ("ratings.txt", "userId,movieId,rating,timestamp\n1,10,4,5\n", "ml-csv"),  # no .csv name needed
        ("data.csv", "1 10\n1 11\n2 12\n", "pairs"),  # a .csv name does not make pairs ml-csv
        ("x.log", "user_id:token\titem_id:token\nu1\ti1\n", "inter"),  # no .inter name needed
        ("sessions.txt", "1 2 3\n1 4\n2 5 6\n", "sessions"),  # open content: the name breaks the tie
        ("clicks.txt", "5 6 7\n8\n5 9\n", "sessions"),  # a one-id line is only a session
    ],
)
def test_detection_reads_the_content_and_uses_the_name_only_to_break_a_tie(tmp_path, name, text, fmt):
    assert resolve_format(write(tmp_path / name, text)).format == fmt


def test_gzip_is_recognised_by_its_content_not_its_name(tmp_path):
    packed = tmp_path / "pairs.txt"
    packed.write_bytes(gzip.compress(b"1 10\n1 11\n2 12\n"))
    plain = write(tmp_path / "plain.txt.gz", "1 10\n1 11\n2 12\n")
    for path in (packed, plain):
        log, fmt = read_interactions(path)
        assert fmt == "pairs" and log.item.tolist() == [10, 11, 12]


def test_crlf_bom_and_spaces_around_ids_read_as_if_absent(tmp_path):
    path = tmp_path / "ratings.csv"
    path.write_bytes(b"\xef\xbb\xbfuserId,movieId,rating,timestamp\r\n 1 , 10 ,4,5\r\n1,11,4,6\r\n")
    log, fmt = read_interactions(path)
    assert fmt == "ml-csv" and log.user.tolist() == [1, 1] and log.item.tolist() == [10, 11]
    joined = tmp_path / "joined.txt"  # two exports joined, each with its byte-order mark
    joined.write_bytes(b"\xef\xbb\xbf1 10\n1 11\n\xef\xbb\xbf2 12\n")
    log, _ = read_interactions(joined)
    assert log.user.tolist() == [1, 1, 2] and log.item.tolist() == [10, 11, 12]


# ---- hostile files: one line naming what and where, nothing written ----

HOSTILE = [
    ("empty.txt", b"", "is empty"),
    ("blank.txt", b"  \n\n\t\n", "is empty"),
    ("header.csv", b"userId,movieId,rating,timestamp\n", "has a header but no interaction rows"),
    ("nul.txt", b"1 10\n1 \x00 11\n", r"nul\.txt:2: control character 0x00: binary data"),
    ("latin.txt", "1 10\n1 café\n".encode("latin-1"), r"latin\.txt:2: byte 0xe9 is not UTF-8 text"),
    ("archive.txt", b"PK\x03\x04\x14\x00junk", "is a zip archive, not a text log"),
    ("table.parquet", b"PAR1\x00\x00", "is a Parquet file, not a text log"),
    ("broken.txt.gz", b"\x1f\x8b\x08\x00\x00", "cannot read"),
    (
        "giant.txt",
        b"1 10\n1 " + b"9" * 5000 + b"\n",
        r"giant\.txt:2: id '9{30}' is 5,000 characters long",
    ),
    ("under.txt", b"1 10\n1 1_000\n", r"under\.txt:2: id '1_000' is not an integer id"),
    ("digits.txt", "1 10\n1 ٣\n".encode(), r"digits\.txt:2: id '٣' is not an integer id"),
    ("hdr.txt", b"user item\n1 10\n1 11\n", r"hdr\.txt:1: the first line 'user item' looks like a header"),
    ("nohdr.csv", b"1,10,4,5\n", r"nohdr\.csv:1: comma-separated without a header"),
    ("other.csv", b"user,item\n1,10\n", r"other\.csv:1: missing column 'userId'"),
    (
        "table.tsv",
        b"1\t10\t4\t978300760\n1\t11\t5\t978300761\n2\t12\t3\t978300762\n",
        "every line has 4 columns and column 4 looks like timestamps",
    ),
    (
        "twice.csv",
        b"userId,movieId,rating,timestamp\n1,10,4,5\nuserId,movieId,rating,timestamp\n1,11,4,6\n",
        r"twice\.csv:3: the header line repeats",
    ),
    (
        "twice.inter",
        b"user_id:token\titem_id:token\nu\ti\nuser_id:token\titem_id:token\n",
        r"twice\.inter:3: the header line repeats",
    ),
    (
        "blank.inter",
        b"user_id:token\titem_id:token\nu1\ti1\nu1\t \n",
        r"blank\.inter:3: the item id is empty",
    ),
    ("nouser.csv", b"userId,movieId\n1,10\n,11\n", r"nouser\.csv:3: the user id is empty"),
    (
        "long.inter",
        b"user_id:token\titem_id:token\nu1\t" + b"x" * 300 + b"\n",
        r"long\.inter:2: the item id is 300 characters long",
    ),
    ("neg.dat", b"1::10::4::5\n1::11::4::-1\n", r"neg\.dat:2: timestamp '-1' is negative"),
    (
        "neg.csv",
        b"userId,movieId,rating,timestamp\n1,10,4,5\n1,11,4,-3\n",
        r"neg\.csv:3: timestamp '-3' is negative",
    ),
    ("nan.dat", b"1::10::4::5\n1::11::4::NaN\n", r"nan\.dat:2: timestamp 'NaN' is not a finite number"),
    ("mixed.dat", b"1::10::4::5\n1,11,4,6\n", r"mixed\.dat:2: expected 4 fields separated by '::'"),
    ("pairs.txt", b"1 10\n1 11\n1 12\n2 10\n2 11\n2\n3 10\n3 11\n", r"pairs\.txt:6: expected 'user item'"),
    ("users.txt", b"1 10 11 12\n2 10\n3 11 12\n4\n5 10 11\n", r"users\.txt:4: expected 'user item1 item2"),
    ("rated.txt", b"1 10 5\n1 11 4\n2 10 3\n2 12 5\n", "every line has 3 columns and the first ids repeat"),
    ("ambiguous.txt", b"1 2 3 4\n1 5 6\n2 7 8 9\n", "it could be user-lines or sessions; pass --format"),
    (
        "spaces.inter",
        b"user_id:token item_id:token\nu1 i1\n",
        r"spaces\.inter:1: the \.inter header .* by spaces",
    ),
    ("long_line.txt", b"1 " * 600_000, r"long_line\.txt:1: the first line is over 1 MiB long"),
]


@pytest.mark.parametrize(("name", "data", "message"), HOSTILE, ids=[h[0] for h in HOSTILE])
def test_a_hostile_file_is_one_line_naming_file_and_line_and_nothing_is_written(
    tmp_path, isolated_data_root, capsys, name, data, message
):
    src = tmp_path / name
    src.write_bytes(data)
    error = _refused(capsys, isolated_data_root, "hostile", "--source", str(src))
    assert re.search(message, error), error


def test_a_file_read_in_a_detected_format_says_so_in_its_error(tmp_path, isolated_data_root, capsys):
    src = write(
        tmp_path / "log.txt", "".join(f"{u} {i}\n" for u in (1, 2, 3) for i in (10, 11, 12)) + "4 10 11\n"
    )
    error = _refused(capsys, isolated_data_root, "mine", "--source", str(src))
    assert (
        "log.txt:10: expected 'user item' (2 fields), got 3" in error
        and "(read as pairs: 2 ids per line" in error
    )


def test_one_file_given_twice_or_a_folder_is_refused(tmp_path, isolated_data_root, capsys):
    src = write(tmp_path / "log.txt", "1 10\n1 11\n1 12\n1 13\n2 10\n")
    copy = write(tmp_path / "copy.txt", src.read_text())
    error = _refused(capsys, isolated_data_root, "twice", "--source", str(src), "--source", str(copy))
    assert f"--source {copy} holds the same bytes as --source {src}" in error and "count twice" in error
    error = _refused(capsys, isolated_data_root, "folder", "--source", str(tmp_path))
    assert f"--source {tmp_path} is a folder" in error


def test_a_non_finite_min_rating_is_refused(tmp_path, isolated_data_root, capsys):
    src = write(tmp_path / "ratings.dat", "1::10::4::5\n1::11::4::6\n1::12::4::7\n1::13::4::8\n")
    for value in ("nan", "inf", "-inf"):
        error = _refused(capsys, isolated_data_root, "rated", "--source", str(src), f"--min-rating={value}")
        assert "--min-rating must be a finite number" in error


# ---- timestamps are never dropped silently; order is kept ----


def test_timed_and_untimed_sources_are_refused_unless_asked_and_then_recorded(
    tmp_path, isolated_data_root, capsys
):
    timed = write(
        tmp_path / "timed.csv", "userId,movieId,rating,timestamp\n1,10,4,300\n1,11,4,100\n1,12,4,200\n"
    )
    untimed = write(tmp_path / "untimed.txt", "1 13\n1 14\n2 10\n2 11\n2 12\n2 13\n")
    error = _refused(capsys, isolated_data_root, "mix", "--source", str(timed), "--source", str(untimed))
    assert f"--source {timed} has timestamps and {untimed} has none" in error and "--drop-timestamps" in error
    code, out, _ = _prepare(
        capsys, "mix", "--source", str(timed), "--source", str(untimed), "--drop-timestamps"
    )
    assert code == 0 and len(out) == 3  # two format lines, then the summary
    data = load_dataset("mix")
    assert data.timestamp is None and data.manifest["options"]["drop_timestamps"] is True
    raw = pd.read_parquet(isolated_data_root / "mix" / "items.parquet").set_index("item")["raw_id"]
    user1 = [int(raw[i]) for u, i in zip(data.user, data.item, strict=True) if u == 1]
    assert user1 == [
        10,
        11,
        12,
        13,
        14,
    ]  # the lines' order, file after file: the times were dropped on request


def test_two_timed_sources_order_each_history_by_time_across_files(tmp_path, isolated_data_root):
    first = write(tmp_path / "a.csv", "userId,movieId,rating,timestamp\n1,10,4,300\n1,11,4,100\n2,20,4,5\n")
    second = write(
        tmp_path / "b.csv", "userId,movieId,rating,timestamp\n1,12,4,200\n1,13,4,50\n2,21,4,1\n2,22,4,9\n"
    )
    prepare_dataset("two", [first, second])
    data = load_dataset("two")
    raw = pd.read_parquet(isolated_data_root / "two" / "items.parquet").set_index("item")["raw_id"]
    history = {u: [int(raw[i]) for v, i in zip(data.user, data.item, strict=True) if v == u] for u in (1, 2)}
    assert history == {1: [13, 11, 12, 10], 2: [21, 20, 22]}  # by time, across the two files
    assert data.timestamp is not None and "drop_timestamps" not in data.manifest["options"]


def test_sessions_are_not_joined_with_files_of_users(tmp_path, isolated_data_root, capsys):
    sessions = write(tmp_path / "sessions.txt", "1 2 3\n1 4\n2 5 6\n")  # sessions by its name
    pairs = write(tmp_path / "p.txt", "1 10\n1 11\n1 12\n2 10\n")
    error = _refused(capsys, isolated_data_root, "both", "--source", str(sessions), "--source", str(pairs))
    assert "is read as sessions and" in error and "session numbers would merge with user ids" in error


# ---- a folder of the user's where a dataset would go ----


def _foreign(root, kind: str):
    """Something under root/mine that is not a prepared dataset, and the file in it that must survive."""
    root.mkdir(parents=True, exist_ok=True)
    mine = root / "mine"
    if kind == "file":
        return write(mine, "x\n")
    if kind == "symlink":  # a link, even to a real dataset folder, is not replaced through
        target = root.parent / "elsewhere"
        write(target / "manifest.json", "{}")
        mine.symlink_to(target)
        return target / "manifest.json"
    if kind == "corrupt manifest":
        write(mine / "manifest.json", "{not json")
        return write(mine / "important.txt", "x\n")
    return write(mine / "important.txt", "x\n")


@pytest.mark.parametrize("force", [[], ["--force"]])
@pytest.mark.parametrize("kind", ["folder", "file", "symlink", "corrupt manifest"])
def test_prepare_never_replaces_what_is_not_a_prepared_dataset(
    tmp_path, isolated_data_root, capsys, kind, force
):
    src = write(tmp_path / "log.txt", _user_lines(range(1, 9)))
    kept = _foreign(isolated_data_root, kind)
    before = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    code, out, err = _prepare(capsys, "mine", "--source", str(src), *force)
    assert code == 2 and out == [] and len(err) == 1, (out, err)
    assert (
        err[0].startswith(f"modsar: error: {isolated_data_root / 'mine'} is ") and "choose another" in err[0]
    )
    assert kept.read_text() in ("x\n", "{}")
    assert {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()} == before
    assert not list(isolated_data_root.glob(".staging-mine-*")) and not list(
        isolated_data_root.glob(".old-*")
    )


def test_prepare_fills_an_empty_folder_and_force_replaces_a_prepared_dataset(tmp_path, isolated_data_root):
    first = write(tmp_path / "a.txt", _user_lines(range(1, 9)))
    second = write(tmp_path / "b.txt", _user_lines(range(1, 12), seed=1))
    (isolated_data_root / "mine").mkdir(parents=True)
    _, reused = prepare_dataset("mine", [first])
    assert not reused and load_dataset("mine").num_users == 8
    with pytest.raises(ModsarError, match="already exists"):
        prepare_dataset("mine", [second])
    _, reused = prepare_dataset("mine", [second], force=True)
    assert not reused and load_dataset("mine").num_users == 11
    assert sorted(p.name for p in (isolated_data_root / "mine").iterdir()) == [
        "interactions.parquet",
        "items.parquet",
        "manifest.json",
    ]


# ---- degenerate catalogues ----


def test_a_one_item_catalogue_is_refused_at_prepare(tmp_path, isolated_data_root, capsys):
    src = write(tmp_path / "one.txt", "1 7\n1 7\n1 7\n1 7\n2 7\n2 7\n2 7\n")
    error = _refused(capsys, isolated_data_root, "one", "--source", str(src))
    assert "only 1 item after preparation (raw id 7)" in error and "every metric would be 1.0" in error


def test_training_refuses_a_catalogue_its_ranking_cannot_tell_apart():
    from modsar.training.feasible import validate_for_dataset

    with pytest.raises(ModsarError, match="has 1 item: every ranking puts it first"):
        validate_for_dataset(Config(), 1)
    cfg = load_config(None, ["train.monitor=recall@10"])
    with pytest.raises(ModsarError, match=r"'train.monitor' recall@10 is 1.0 for every model .* 8 items"):
        validate_for_dataset(cfg, 8)
    validate_for_dataset(cfg, 11)  # 11 items: recall@10 can miss
    validate_for_dataset(load_config(None, ["train.monitor=ndcg@10"]), 8)  # ndcg still ranks


# ---- results --where on list columns ----


def test_where_compares_list_columns_by_value(tmp_path):
    root = str(tmp_path / "results")
    for trial, ks in (("a", "[1,5,10,20,50]"), ("b", "[5,10]")):
        cfg = load_config(None, [f"eval.ks={ks}", "train.monitor=ndcg@10"])
        write_row(root, result_row(cfg, experiment="exp", trial_id=trial, status="finished"))
    for typed, found in (
        ("eval.ks=[1,5,10,20,50]", ["a"]),
        ("eval.ks=[1, 5, 10, 20, 50]", ["a"]),
        ("eval.ks=[5.0,10]", ["b"]),
        ("eval.ks=[10,5]", []),  # order matters: a list, not a set
        ("eval.ks=[1,5", []),
    ):
        assert sorted(matching_rows(root, "exp", [typed])["trial_id"]) == found, typed


# ---- train --results file:// ----


def test_a_file_uri_results_root_is_a_local_path_and_other_uris_need_no_checkpoint(tmp_path):
    from modsar.records.run import _uri_results

    assert _uri_results(f"file://{tmp_path}/results", True) == f"{tmp_path}/results"
    assert _uri_results("s3://bucket/results", False) == "s3://bucket/results"
    with pytest.raises(ModsarError, match="writes its best checkpoint to a local or shared folder"):
        _uri_results("s3://bucket/results", True)


def test_train_into_a_file_uri_writes_its_checkpoint(tmp_path, capsys):
    uri = f"file://{tmp_path}/results"
    args = ["train.max_epochs=1", "model.hidden_size=8", "model.num_heads=1", "data.max_len=8"]
    assert main(["train", "--dataset", "synthetic", "--results", uri, "--quiet", "--json", *args]) == 0
    row = json.loads(capsys.readouterr().out)
    assert row["checkpoint"].startswith(str(tmp_path / "results" / "train-synthetic" / "checkpoints"))
    assert (tmp_path / "results" / "train-synthetic" / "checkpoints").is_dir()
    assert list((tmp_path / "results" / "train-synthetic" / "checkpoints").glob("*.pt"))


@pytest.mark.parametrize("uri", ["file://rel", "file://rel/results"])
def test_train_into_a_relative_file_uri_is_one_line(tmp_path, capsys, uri, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["train", "--dataset", "synthetic", "--results", uri, "--quiet", "train.max_epochs=1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"modsar: error: cannot open the results root {uri}: "), err
    assert "file:///absolute/path" in err[0] and list(tmp_path.iterdir()) == []


# ---- analyze ----


def _selected(root, experiment, dataset, task, checkpoint):
    cfg = load_config(None, [f"task={task}"])
    facts = {"checkpoint": str(checkpoint)}
    row = result_row(
        cfg,
        experiment=experiment,
        trial_id=f"{dataset}-{task}",
        status="finished",
        space="vanilla",
        facts=facts,
    )
    write_row(str(root), row | {"selected": True, "dataset": dataset})


def test_analyze_takes_every_dataset_of_an_experiment_or_the_one_named(tmp_path, capsys):
    from modsar.cli.analyze import _targets

    root = tmp_path / "results"
    for dataset in ("beauty", "video"):
        for task in ("ae", "ar"):
            path = write(tmp_path / f"{dataset}-{task}.pt", "")
            _selected(root, "exp", dataset, task, path)

    def targets(dataset=None):
        args = argparse.Namespace(checkpoint=None, experiment=["exp"], results=str(root), dataset=dataset)
        return sorted((p.rsplit("/", 1)[-1], source) for p, source in _targets(args))

    assert targets() == [
        ("beauty-ae.pt", "exp, beauty"),
        ("beauty-ar.pt", "exp, beauty"),
        ("video-ae.pt", "exp, video"),
        ("video-ar.pt", "exp, video"),
    ]
    assert targets(["video"]) == [("video-ae.pt", "exp"), ("video-ar.pt", "exp")]
    with pytest.raises(
        ModsarError, match=r"--dataset ml-1m: experiment 'exp' has no rows on it .* beauty, video"
    ):
        targets(["ml-1m"])


@pytest.mark.parametrize("sigma", ["nan", "inf", "-inf", "-0.5"])
def test_analyze_refuses_a_sigma_that_is_no_finite_non_negative_number(tmp_path, capsys, sigma):
    code = main(["analyze", "--checkpoint", str(tmp_path / "none.pt"), f"--sigma={sigma}", "--device", "cpu"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "--sigma a finite number >= 0" in err[0]


# ---- report ----


def _report_rows(root):
    for trial, dataset, task, value in (
        ("v1", "video", "ae", 0.02),
        ("v2", "video", "ar", 0.03),
        ("b1", "beauty", "ae", 0.04),
        ("b2", "beauty", "ar", 0.05),
    ):
        write_row(root, report_row(trial, dataset, "vanilla", task, value, **{"train.monitor": "ndcg@10"}))


def test_a_second_report_replaces_the_first_reports_files_and_only_them(tmp_path, capsys):
    from modsar.report.files import OUTPUTS_LIST

    root, out = str(tmp_path / "results"), tmp_path / "report"
    _report_rows(root)
    mine = [
        write(out / "notes.txt", "mine"),
        write(out / "figure.png", "mine"),
        write(out / "sub" / "x.md", "mine"),
    ]
    assert main(["report", "--results", root, "--out", str(out)]) == 0
    first = {p.name for p in out.iterdir() if p.is_file()}
    assert {"report.md", "bars_beauty_ndcg10.png", "bars_video_ndcg10.png", OUTPUTS_LIST} <= first
    assert (
        main(["report", "--results", root, "--dataset", "video", "--format", "csv", "--out", str(out)]) == 0
    )
    after = {p.name for p in out.iterdir() if p.is_file()}
    assert "bars_beauty_ndcg10.png" not in after and "report.md" not in after  # the first report's, replaced
    assert {"bars_video_ndcg10.png", "report.csv", "notes.txt", "figure.png"} <= after
    assert all(p.read_text() == "mine" for p in mine)  # never a file the report did not write
    listed = json.loads((out / OUTPUTS_LIST).read_text())
    assert "report.csv" in listed and "bars_beauty_ndcg10.png" not in listed
    assert not list(out.glob(".report-staging-*")) and not list(out.glob(".tmp-*"))
    capsys.readouterr()


def test_a_report_folder_from_before_the_list_loses_only_report_named_files(tmp_path):
    from modsar.report.files import replace_outputs

    out = tmp_path / "out"
    old = [write(out / "bars_old_ndcg10.png", "old"), write(out / "exp" / "curves_exp.png", "old")]
    kept = [
        write(out / "my.png", "mine"),
        write(out / "exp" / "notes.md", "mine"),
        write(out / "deep/a/bars_x.png", "m"),
    ]
    replace_outputs(out, lambda folder: [write(folder / "report.md", "new")])
    assert not any(p.exists() for p in old) and all(p.exists() for p in kept)
    assert (out / "report.md").read_text() == "new"


def test_a_tampered_outputs_list_never_removes_another_file(tmp_path):
    from modsar.report.files import OUTPUTS_LIST, is_report_file, replace_outputs

    out = tmp_path / "out"
    victim = write(tmp_path / "bars_victim.png", "keep")
    notes = write(out / "notes.txt", "keep")
    write(out / OUTPUTS_LIST, json.dumps(["../bars_victim.png", "notes.txt", str(victim), "a/b/bars_x.png"]))
    written = replace_outputs(out, lambda folder: [write(folder / "report.md", "new")])
    assert [p.name for p in written] == ["report.md"] and victim.read_text() == notes.read_text() == "keep"
    assert is_report_file("exp/curves_exp.png") and not is_report_file("exp/report.md")
    assert not is_report_file("../bars_x.png") and not is_report_file(".hidden/bars_x.png")


def test_the_curves_axis_names_the_monitored_metric():
    from modsar.report.plots import curve_label

    assert curve_label(pd.DataFrame({"train.monitor": ["ndcg@10", "ndcg@10"]})) == "validation NDCG@10"
    assert curve_label(pd.DataFrame({"train.monitor": ["hr@5", "mrr@20"]})) == "validation HR@5 / MRR@20"
    assert curve_label(pd.DataFrame({"x": [1]})) == "validation metric (not recorded)"
