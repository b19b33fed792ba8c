"""`data prepare <registry name> --source FILE` reads the file in the format it is in (issue 30, point 6): the
registry name brings its preprocessing, the file its format; --format and --download keep theirs."""

from __future__ import annotations

import hashlib
import json

import numpy as np
import pytest
from conftest import write

from modsar.cli import main
from modsar.data.registry import REGISTRY, DatasetSpec
from modsar.data.store import load_dataset, prepare_dataset
from modsar.errors import ModsarError


def _histories() -> dict[int, list[int]]:
    """Users with 2..14 interactions over 12 items, items 11 and 12 rare: ml-1m's min counts (5 and 5, one
    pass) drop some items and users, so the registry's preprocessing visibly applies."""
    rng = np.random.default_rng(3)
    histories = {}
    for user in range(1, 31):
        length = 2 + (user * 7) % 13
        histories[user * 3] = [int(i) for i in rng.choice(10, size=length) + 1]  # raw user ids 3, 6, ...
    histories[6] += [11, 12]
    histories[9] += [11]
    return histories


def _pairs_and_ratings_dat(folder):
    """The same interactions as SASRec's pairs (`user item`, each user's lines in time order) and as MovieLens
    ratings.dat (`user::item::rating::timestamp`, lines shuffled: the timestamps carry the order)."""
    histories = _histories()
    pairs = "".join(f"{u} {i}\n" for u, items in histories.items() for i in items)
    rows, clock = [], 978_300_000
    for position in range(max(len(items) for items in histories.values())):  # interleave users in time
        for user, items in histories.items():
            if position < len(items):
                clock += 7
                rows.append(f"{user}::{items[position]}::{1 + clock % 5}::{clock}\n")  # every rating 1..5
    order = np.random.default_rng(0).permutation(len(rows))
    dat = "".join(rows[k] for k in order)
    return write(folder / "ml-1m.txt", pairs), write(folder / "ratings.dat", dat)


def _prepare_json(capsys, *args) -> dict:
    assert main(["data", "prepare", *args, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_ml_1m_from_sasrec_pairs_equals_ml_1m_from_ratings_dat(tmp_path, capsys):
    pairs, dat = _pairs_and_ratings_dat(tmp_path)
    from_pairs = _prepare_json(capsys, "ml-1m", "--source", str(pairs), "--data-dir", str(tmp_path / "a"))
    from_dat = _prepare_json(capsys, "ml-1m", "--source", str(dat), "--data-dir", str(tmp_path / "b"))
    # the file decides the format, and the manifest says which one was used
    assert [s["format"] for s in from_pairs["sources"]] == ["pairs"]
    assert [s["format"] for s in from_dat["sources"]] == ["ml-dat"]
    assert from_pairs["request"]["format"] == from_dat["request"]["format"] == "auto"
    # the registry name keeps its preprocessing: min counts and max length
    spec = REGISTRY["ml-1m"]
    assert from_pairs["options"] == from_dat["options"] == spec.options()
    assert from_pairs["max_len"] == from_dat["max_len"] == spec.max_len == 200
    assert (
        from_pairs["raw_interactions"]
        == from_dat["raw_interactions"]
        > from_pairs["statistics"]["interactions"]
    )
    assert from_pairs["statistics"] == from_dat["statistics"]
    assert from_pairs["statistics"]["users"] < len(_histories())  # filters bit
    a, b = load_dataset("ml-1m", tmp_path / "a"), load_dataset("ml-1m", tmp_path / "b")
    assert a.user.tolist() == b.user.tolist() and a.item.tolist() == b.item.tolist()
    assert a.timestamp is None and b.timestamp is not None  # only ratings.dat has times


def test_the_same_data_read_the_same_way_is_reused_however_the_format_was_named(tmp_path, capsys):
    pairs, dat = _pairs_and_ratings_dat(tmp_path)
    first = _prepare_json(capsys, "ml-1m", "--source", str(pairs))
    assert main(["data", "prepare", "ml-1m", "--source", str(pairs), "--format", "pairs"]) == 0
    assert "already prepared (reused)" in capsys.readouterr().out
    # a manifest written before the format was detected for registry names recorded the registry's format
    _prepare_json(capsys, "ml-1m", "--source", str(dat), "--force")
    path = tmp_path / "datasets" / "ml-1m" / "manifest.json"
    old = json.loads(path.read_text())
    old["request"]["format"] = "ml-dat"
    path.write_text(json.dumps(old))
    assert main(["data", "prepare", "ml-1m", "--source", str(dat)]) == 0
    assert "already prepared (reused)" in capsys.readouterr().out
    # but other data under the name still needs --force
    assert main(["data", "prepare", "ml-1m", "--source", str(pairs)]) == 2
    assert "already exists" in capsys.readouterr().err
    assert first["sources"][0]["format"] == "pairs"


def test_an_explicit_format_is_kept_for_a_registry_name(tmp_path, isolated_data_root, capsys):
    pairs, _ = _pairs_and_ratings_dat(tmp_path)
    assert main(["data", "prepare", "ml-1m", "--source", str(pairs), "--format", "ml-dat"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "ml-1m.txt:1: expected 4 fields separated by '::'" in err[0]
    assert not (isolated_data_root / "ml-1m").exists()


def test_the_registrys_own_download_is_read_in_the_registrys_format(isolated_data_root):
    """Sessions whose first items never repeat look like `user i1 i2 ...` lines to the detector; the
    registry's own file (already downloaded and checksum-verified here) is read as the registry says:
    sessions."""
    text = "".join(f"{s} {s + 40} {s + 80} {s + 120}\n" for s in range(1, 7))
    spec = DatasetSpec(
        "clicks",
        "test",
        "sessions",
        20,
        url="http://127.0.0.1:9/clicks.txt",
        sha256=hashlib.sha256(text.encode()).hexdigest(),
    )
    write(isolated_data_root / "_downloads" / "clicks" / "clicks.txt", text)
    manifest, _ = prepare_dataset("clicks", download_missing=True, spec=spec)
    assert manifest["sources"][0]["format"] == "sessions" and manifest["request"]["format"] == "sessions"
    assert manifest["statistics"]["interactions"] == 24 and manifest["statistics"]["items"] == 24


AMBIGUOUS = (
    "1 2 3 4\n1 5 6\n2 7 8 9\n"  # lines of 3-4 ids whose first ids repeat: one user per line? sessions?
)


def test_an_ambiguous_file_names_what_it_could_be_and_how_to_choose(tmp_path, isolated_data_root, capsys):
    src = write(tmp_path / "x.txt", AMBIGUOUS)
    assert main(["data", "prepare", "mine", "--source", str(src)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("modsar: error:")
    assert (
        f"cannot tell the format of '{src}' from its first lines: it could be user-lines or sessions; "
        "pass --format user-lines (or another of: pairs, inter, ml-csv, ml-dat, sessions)"
    ) in err[0]
    assert main(["data", "prepare", "mine", "--source", str(src), "--format", "sessions"]) == 0
    assert not (isolated_data_root / "video").exists()
    assert main(["data", "prepare", "video", "--source", str(src)]) == 2  # video's pairs do not fit it
    assert "it could be user-lines or sessions" in capsys.readouterr().err


def test_a_registry_format_breaks_a_tie_the_file_leaves_open(tmp_path, capsys):
    src = write(tmp_path / "x.txt", AMBIGUOUS)
    manifest = _prepare_json(capsys, "diginetica", "--source", str(src))
    assert manifest["sources"][0]["format"] == "sessions" and manifest["statistics"]["users"] == 3


def test_a_file_no_format_reads_says_so(tmp_path, capsys):
    src = write(tmp_path / "words.txt", "apple pear fig\napple kiwi\n")
    assert main(["data", "prepare", "mine", "--source", str(src)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"cannot tell the format of '{src}'" in err[0]
    assert "none of the formats reads them" in err[0] and "--format with one of: pairs, user-lines" in err[0]


def test_a_registry_rating_filter_needs_ratings_in_the_file(tmp_path):
    """A benchmark whose preprocessing keeps ratings >= 4 is not silently prepared without that filter from
    a file that has no ratings: the error says which filter, which file, and the way out."""
    pairs, dat = _pairs_and_ratings_dat(tmp_path)
    spec = DatasetSpec("rated", "test", "ml-dat", 50, min_rating=4.0)
    with pytest.raises(
        ModsarError,
        match=r"'rated' keeps only ratings >= 4 \(its registry preprocessing\), but "
        r".*ml-1m\.txt \(pairs\) has no rating column; pass a file with ratings",
    ):
        prepare_dataset("rated", [pairs], spec=spec)
    manifest, _ = prepare_dataset("rated", [dat], spec=spec)
    assert manifest["options"]["min_rating"] == 4.0
    assert manifest["statistics"]["interactions"] < manifest["raw_interactions"]


def test_sessions_whose_first_items_differ_stay_sessions_under_a_session_registry(tmp_path, capsys):
    """Distinct first ids look like one line per user; read so, each session would lose its first item. Under
    diginetica (a registry of sessions) such a file is sessions; under a name of your own it stays
    user-lines."""
    src = write(
        tmp_path / "train.txt", "".join(f"{s} {s + 1} {s + 2} {s + 3} {s + 4}\n" for s in range(1, 41))
    )
    manifest = _prepare_json(
        capsys, "diginetica", "--source", str(src), "--min-user-count", "0", "--min-item-count", "0"
    )
    assert manifest["sources"][0]["format"] == "sessions" and manifest["statistics"]["interactions"] == 200
    mine = _prepare_json(capsys, "mine", "--source", str(src))
    assert mine["sources"][0]["format"] == "user-lines" and mine["statistics"]["interactions"] == 160
