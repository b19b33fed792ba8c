"""Importers on small files of every format, auto-detection, .gz, and the preparation pipeline."""

from __future__ import annotations

import gzip

import numpy as np
import pytest
from conftest import write

from modsar.data.importers import read_interactions
from modsar.data.prepare import PrepareOptions, prepare_log
from modsar.errors import ModsarError

SAMPLES = {
    "pairs": ("log.txt", "1 10\n1 11\n2 12\n1 13\n2 10\n"),
    "user-lines": ("users.txt", "1 10 11 13\n2 12 10\n"),
    "inter": (
        "x.inter",
        "user_id:token\titem_id:token\trating:float\ttimestamp:float\n"
        "1\t10\t4\t300\n1\t11\t5\t100\n2\t12\t3\t50\n1\t13\t2\t200\n2\t10\t1\t60\n",
    ),
    "ml-csv": (
        "ratings.csv",
        "userId,movieId,rating,timestamp\n1,10,4.0,300\n1,11,5.0,100\n2,12,3.5,50\n"
        "1,13,2.0,200\n2,10,1.0,60\n",
    ),
    "ml-dat": ("ratings.dat", "1::10::4::300\n1::11::5::100\n2::12::3::50\n1::13::2::200\n2::10::1::60\n"),
    "sessions": ("train_sessions.txt", "10 11 13\n12 10\n"),
}


@pytest.mark.parametrize("fmt", sorted(SAMPLES))
def test_each_format_reads_and_is_detected(tmp_path, fmt):
    name, text = SAMPLES[fmt]
    path = write(tmp_path / name, text)
    log, detected = read_interactions(path)
    assert detected == fmt
    assert len(log) == 5
    assert sorted(log.item.astype(str).tolist()) == ["10", "10", "11", "12", "13"]
    if fmt in ("inter", "ml-csv", "ml-dat"):
        assert log.timestamp is not None and log.rating is not None


def test_a_byte_order_mark_is_not_part_of_the_first_id(tmp_path):
    path = tmp_path / "bom.txt"
    path.write_bytes(b"\xef\xbb\xbf7 2\n7 3\n")
    log, _ = read_interactions(path, "auto")
    assert log.user.tolist() == [7, 7] and log.item.tolist() == [2, 3]


def test_gz_is_read_transparently(tmp_path):
    path = tmp_path / "Video.txt.gz"
    path.write_bytes(gzip.compress(SAMPLES["pairs"][1].encode()))
    log, fmt = read_interactions(path)
    assert fmt == "pairs" and log.user.tolist() == [1, 1, 2, 1, 2]


def test_chronological_order_uses_timestamps_then_file_order(tmp_path):
    log, _ = read_interactions(write(tmp_path / "ratings.dat", SAMPLES["ml-dat"][1]))
    prepared = prepare_log(log, PrepareOptions())
    # user 1: items 11 (t=100), 13 (t=200), 10 (t=300); user 2: 12 (t=50), 10 (t=60). Ids remapped sorted.
    assert prepared.raw_items.tolist() == [10, 11, 12, 13]
    assert prepared.user.tolist() == [1, 1, 1, 2, 2]
    assert prepared.item.tolist() == [2, 4, 1, 3, 1]


def test_ties_and_timeless_formats_keep_file_order(tmp_path):
    log, _ = read_interactions(write(tmp_path / "a.txt", "2 5\n1 9\n2 4\n1 3\n2 7\n"), "pairs")
    prepared = prepare_log(log, PrepareOptions())
    raw = prepared.raw_items[prepared.item - 1]
    assert raw.tolist() == [9, 3, 5, 4, 7]


def test_min_counts_single_pass_vs_kcore(tmp_path):
    # Item 30 has 2 interactions; dropping it leaves user 3 with 1 interaction -> removed only by k-core.
    text = "1 10\n1 20\n2 10\n2 20\n3 30\n3 10\n4 30\n4 20\n4 10\n"
    log, _ = read_interactions(write(tmp_path / "k.txt", text), "pairs")
    one = prepare_log(log, PrepareOptions(min_user_count=2, min_item_count=3))
    core = prepare_log(log, PrepareOptions(min_user_count=2, min_item_count=3, kcore=True))
    assert one.num_users == 4 and len(one.user) == 7
    assert core.num_users == 3 and core.raw_users.tolist() == [1, 2, 4]
    counts = np.bincount(core.item)[1:]
    assert counts.min() >= 3


def test_consecutive_repeats_removed_only_when_asked(tmp_path):
    log, _ = read_interactions(write(tmp_path / "r.txt", "1 5\n1 5\n1 6\n1 5\n2 5\n"), "pairs")
    assert len(prepare_log(log, PrepareOptions()).item) == 5
    dedup = prepare_log(log, PrepareOptions(dedup_consecutive=True))
    assert dedup.raw_items[dedup.item - 1].tolist() == [5, 6, 5, 5]


def test_min_rating(tmp_path):
    log, _ = read_interactions(write(tmp_path / "ratings.csv", SAMPLES["ml-csv"][1]))
    assert len(prepare_log(log, PrepareOptions(min_rating=3.0)).item) == 3


@pytest.mark.parametrize(
    "name,text,fmt,message",
    [
        ("empty.txt", "", "auto", "is empty"),
        ("bad.txt", "1 10\n1 x7\n", "pairs", "bad.txt:2: id 'x7' is not an integer"),
        ("three.txt", "1 10\n1 11 12\n", "pairs", "three.txt:2: expected 'user item'"),
        ("r.inter", "user_id:token\trating:float\n1\t3\n", "auto", "missing column 'item_id:token'"),
        ("ratings.csv", "userId,rating\n1,3\n", "auto", "missing column 'movieId'"),
        ("x.txt", "1 2\n", "parquet", "unknown format 'parquet'"),
        ("ts.dat", "1::2::3::yesterday\n", "ml-dat", "timestamp 'yesterday' is not a number"),
        (
            "nan.dat",
            "1::2::3::5\n1::3::4::nan\n",
            "ml-dat",
            "nan.dat:2: timestamp 'nan' is not a finite number",
        ),
        (
            "inf.csv",
            "userId,movieId,rating\n1,2,inf\n",
            "auto",
            "inf.csv:2: rating 'inf' is not a finite number",
        ),
        (
            "huge.txt",
            "1 2\n1 99999999999999999999999\n",
            "pairs",
            "huge.txt:2: id '99999999999999999999999' does not fit",
        ),
    ],
)
def test_bad_files_raise_clear_errors(tmp_path, name, text, fmt, message):
    path = write(tmp_path / name, text)
    with pytest.raises(ModsarError, match=message.replace("(", r"\(")):
        read_interactions(path, fmt)


def test_nothing_left_after_filtering(tmp_path):
    log, _ = read_interactions(write(tmp_path / "s.txt", "1 10\n2 11\n"), "pairs")
    with pytest.raises(ModsarError, match="nothing is left"):
        prepare_log(log, PrepareOptions(min_user_count=5))


@pytest.mark.parametrize("variant", ["plain", "bom", "gz", "crlf", "no-timestamp"])
def test_ml_csv_fast_reader_equals_the_line_reader(tmp_path, variant):
    """pyarrow's CSV reader (no Python per line) gives exactly what the line-by-line reader gives."""
    from modsar.data.importers import READERS, fast_ml_csv

    text = SAMPLES["ml-csv"][1]
    if variant == "crlf":
        text = text.replace("\n", "\r\n")
    if variant == "no-timestamp":
        text = "\n".join(",".join(line.split(",")[:3]) for line in text.splitlines()) + "\n"
    raw = (b"\xef\xbb\xbf" if variant == "bom" else b"") + text.encode()
    path = tmp_path / ("ratings.csv.gz" if variant == "gz" else "ratings.csv")
    path.write_bytes(gzip.compress(raw) if variant == "gz" else raw)
    fast = fast_ml_csv(path)
    slow = READERS["ml-csv"](path, raw.decode("utf-8-sig"))
    assert fast is not None
    for name in ("user", "item", "timestamp", "rating"):
        want, got = getattr(slow, name), getattr(fast, name)
        assert (got is None) == (want is None) and (
            want is None or (got.tolist() == want.tolist() and got.dtype == want.dtype)
        )
    assert (fast.timestamp is None) == (variant == "no-timestamp")


@pytest.mark.parametrize(
    ("line", "error"),
    [
        ("1,x,4.0,5", "ratings.csv:3: id 'x' is not an integer id"),
        ("1,10,4.0", "ratings.csv:3: expected 4 fields"),
        ("1,10,4.0,nan", "ratings.csv:3: timestamp 'nan' is not a finite"),
        ("1,10,,5", "ratings.csv:3: rating '' is not a number"),
    ],
)
def test_a_malformed_ml_csv_line_is_still_named(tmp_path, line, error):
    path = write(tmp_path / "ratings.csv", f"userId,movieId,rating,timestamp\n1,10,4.0,300\n{line}\n")
    with pytest.raises(ModsarError, match=error):
        read_interactions(path)


def test_files_the_fast_reader_cannot_vouch_for_go_to_the_line_reader(tmp_path):
    """Quoted ids are refused with the line named; a repeated header column is read as the line reader reads
    it (its first occurrence), never a crash."""
    from modsar.data.importers import fast_ml_csv

    quoted = write(tmp_path / "ratings.csv", 'userId,movieId,rating,timestamp\n"1",10,4.0,5\n')
    assert fast_ml_csv(quoted) is None
    with pytest.raises(ModsarError, match=r"ratings\.csv:2: id '\"1\"' is not an integer id"):
        read_interactions(quoted)
    repeated = write(tmp_path / "twice.csv", "userId,movieId,userId,timestamp\n1,10,7,5\n")
    assert fast_ml_csv(repeated) is None
    log, _ = read_interactions(repeated)
    assert log.user.tolist() == [1] and log.item.tolist() == [10]
