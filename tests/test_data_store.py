"""Prepared datasets on disk, the registry download path (local HTTP server), CLI error handling, data nobody
can evaluate, and the built-in generated datasets' manifests."""

from __future__ import annotations

import hashlib
import http.server
import json
import threading
from pathlib import Path

import numpy as np
import pytest
from conftest import write

from modsar.cli import main
from modsar.data.prepare import density_text
from modsar.data.registry import REGISTRY, DatasetSpec
from modsar.data.store import load_dataset, prepare_dataset
from modsar.errors import ModsarError

PAIRS = "".join(f"{u} {i}\n" for u in range(1, 7) for i in range(u, u + 5))


def test_prepare_stores_parquet_and_manifest_and_reuses(tmp_path, isolated_data_root):
    src = write(tmp_path / "log.txt", PAIRS)
    manifest, reused = prepare_dataset("toy", [src])
    assert not reused
    assert manifest["statistics"] == {
        "users": 6,
        "items": 10,
        "interactions": 30,
        "avg_length": 5.0,
        "min_length": 5,
        "max_length": 5,
        "density": 0.5,
        "evaluable_users": 6,
    }
    assert manifest["sources"][0]["sha256"] == hashlib.sha256(PAIRS.encode()).hexdigest()
    assert (isolated_data_root / "toy" / "interactions.parquet").is_file()
    again, reused = prepare_dataset("toy", [src])
    assert reused and again["created"] == manifest["created"]
    with pytest.raises(ModsarError, match=r"already exists .* --force"):
        prepare_dataset("toy", [src], options=None, max_len=20)
    data = load_dataset("toy")
    assert data.num_items == 10 and data.item[:5].tolist() == [1, 2, 3, 4, 5]


def test_registry_covers_the_standard_benchmarks():
    for name in (
        "beauty",
        "sports",
        "toys",
        "video",
        "yelp",
        "ml-1m",
        "ml-100k",
        "steam",
        "lastfm",
        "diginetica",
    ):
        assert name in REGISTRY
    assert REGISTRY["ml-1m"].max_len == 200 and REGISTRY["video"].max_len == 50


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@pytest.fixture
def http_root(tmp_path):
    folder = tmp_path / "www"
    folder.mkdir()
    handler = lambda *a, **k: _Quiet(*a, directory=str(folder), **k)  # noqa: E731
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield folder, f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def test_download_verifies_checksum(http_root, isolated_data_root):
    folder, base = http_root
    (folder / "Toy.txt").write_text(PAIRS)
    good = DatasetSpec(
        "dl", "test", "pairs", 20, url=f"{base}/Toy.txt", sha256=hashlib.sha256(PAIRS.encode()).hexdigest()
    )
    manifest, _ = prepare_dataset("dl", download_missing=True, spec=good)
    assert manifest["statistics"]["interactions"] == 30 and manifest["max_len"] == 20

    bad = DatasetSpec("dl2", "test", "pairs", 20, url=f"{base}/Toy.txt", sha256="0" * 64)
    with pytest.raises(ModsarError, match="checksum mismatch"):
        prepare_dataset("dl2", download_missing=True, spec=bad)
    assert not (isolated_data_root / "dl2").exists()


def test_cli_download_mirror_with_registry_checksum(http_root, isolated_data_root, capsys):
    folder, base = http_root
    (folder / "Video.txt").write_text(PAIRS)  # not the real Video file: the registry checksum must refuse it
    assert main(["data", "prepare", "video", "--download", "--url", f"{base}/Video.txt"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "checksum mismatch for 'video'" in err[0]
    assert not (isolated_data_root / "video").exists()


@pytest.mark.parametrize(
    "text,args,message",
    [
        ("", [], "is empty"),
        ("1 10\n1 abc\n", ["--format", "pairs"], "id 'abc' is not an integer"),
        ("user_id:token\tfoo:float\n1\t2\n", ["--format", "inter"], "missing column 'item_id:token'"),
        ("1 10\n", ["--format", "excel"], "unknown format 'excel'"),
        ("1 10\n2 11\n1 12\n", ["--min-user-count", "10"], "nothing is left"),
    ],
)
def test_cli_bad_input_one_line_nonzero_nothing_written(
    tmp_path, isolated_data_root, capsys, text, args, message
):
    src = write(tmp_path / "raw.txt", text)
    code = main(["data", "prepare", "mine", "--source", str(src), *args])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    assert len(err) == 1 and message in err[0] and err[0].startswith("modsar: error:")
    assert not (isolated_data_root / "mine").exists()


def test_cli_unknown_dataset_for_train(capsys):
    assert main(["train", "--dataset", "nosuch", "--quiet"]) == 2
    assert "dataset 'nosuch' is not prepared" in capsys.readouterr().err


def test_cli_stats_and_list_json(tmp_path, capsys):
    src = write(tmp_path / "log.txt", PAIRS)
    assert main(["data", "prepare", "toy", "--source", str(src)]) == 0
    capsys.readouterr()
    assert main(["data", "stats", "toy", "--json"]) == 0
    stats = json.loads(capsys.readouterr().out)
    assert stats["users"] == 6 and stats["density"] == 0.5
    assert main(["data", "list", "--json"]) == 0
    listing = {e["name"]: e for e in json.loads(capsys.readouterr().out)}
    assert listing["toy"]["prepared"] and not listing["video"]["prepared"]


def test_prepare_and_stats_show_one_density(capsys):
    """One unit in both commands: interactions / (users x items) as a percentage (the synthetic data's
    17,919 / (1,000 x 300) = 5.973%; before, prepare printed the fraction 0.059730 and stats 5.9730%)."""
    assert main(["data", "prepare", "synthetic"]) == 0
    prepared = capsys.readouterr().out
    assert main(["data", "stats", "synthetic"]) == 0
    stats = capsys.readouterr().out
    assert "1,000 users, 300 items, 17,919 interactions" in prepared
    assert prepared.endswith(", density 5.97%\n")
    assert "  density        5.97%\n" in stats
    assert main(["data", "stats", "synthetic", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["density"] == 0.05973  # the manifest keeps the fraction


def test_density_text_has_three_significant_digits():
    assert density_text({"interactions": 198_502, "users": 22_363, "items": 12_101}) == "0.0734%"  # Beauty
    assert density_text({"interactions": 30, "users": 6, "items": 10}) == "50.0%"
    assert density_text({"interactions": 1_000_209, "users": 6_040, "items": 3_706}) == "4.47%"  # ML-1M
    assert density_text({"interactions": 4, "users": 2, "items": 2}) == "100%"


def test_sessions_from_two_files_stay_distinct(tmp_path):
    a = write(tmp_path / "train_sessions.txt", "1 2 3\n2 3\n")
    b = write(tmp_path / "test_sessions.txt", "3 1\n")
    manifest, _ = prepare_dataset("sess", [a, b], fmt="sessions")
    assert manifest["statistics"]["users"] == 3 and manifest["statistics"]["interactions"] == 7


def test_synthetic_is_deterministic(tmp_path):
    first = load_dataset("synthetic", tmp_path / "a")
    second = load_dataset("synthetic", tmp_path / "b")
    assert (first.item == second.item).all() and Path(
        tmp_path / "a" / "synthetic" / "manifest.json"
    ).is_file()


def written(root: Path) -> list[str]:
    """Everything under the data root, hidden staging folders included."""
    return sorted(str(p.relative_to(root)) for p in root.rglob("*")) if root.exists() else []


@pytest.mark.parametrize(
    "text,args",
    [
        ("1 1\n1 2\n", []),  # one user, two interactions: no validation and test target
        ("1 1\n1 2\n1 3\n2 1\n2 2\n", ["--min-item-count", "2"]),  # filtering leaves users with 2 items
    ],
)
def test_cli_refuses_data_nobody_can_evaluate(tmp_path, isolated_data_root, capsys, text, args):
    src = write(tmp_path / "short.txt", text)
    code = main(["data", "prepare", "short", "--source", str(src), *args])
    captured = capsys.readouterr()
    err = captured.err.strip().splitlines()
    assert code == 2 and not captured.out
    assert len(err) == 1 and err[0].startswith("modsar: error:") and "Traceback" not in captured.err
    assert str(src) in err[0] and "no user has 3+ interactions" in err[0]  # what and where
    assert "needs users with 3+ interactions" in err[0] and "--min-user-count" in err[0]  # how to fix
    assert written(isolated_data_root) == []  # no dataset folder, manifest or staging leftovers


def test_cli_warns_when_most_users_cannot_be_evaluated(tmp_path, isolated_data_root, capsys):
    src = write(tmp_path / "mostly_short.txt", "1 1\n1 2\n1 3\n2 1\n2 2\n3 4\n3 5\n")
    assert main(["data", "prepare", "mostly", "--source", str(src)]) == 0
    captured = capsys.readouterr()
    err = captured.err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("modsar: warning: mostly:")
    assert "2 of 3 users (66.7%)" in err[0] and "cannot be evaluated" in err[0]
    assert captured.out.startswith(f"read {src} as pairs (")  # the format detected, and why
    assert captured.out.splitlines()[1].startswith("mostly: prepared: 3 users")
    assert main(["data", "stats", "mostly", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["evaluable_users"] == 1
    assert main(["data", "stats", "mostly"]) == 0
    assert "1 of 3 users (33.3%) have 3+ interactions" in capsys.readouterr().out


def test_cli_half_evaluable_and_normal_data_prepare_quietly(tmp_path, capsys):
    half = write(tmp_path / "half.txt", "1 1\n1 2\n1 3\n2 1\n2 2\n")  # 50% is not "most"
    assert main(["data", "prepare", "half", "--source", str(half)]) == 0
    assert capsys.readouterr().err == ""
    src = write(tmp_path / "log.txt", PAIRS)
    assert main(["data", "prepare", "toy", "--source", str(src)]) == 0
    captured = capsys.readouterr()
    assert captured.err == ""
    assert captured.out == (
        f"read {src} as pairs (2 ids per line and the first ids repeat: one (user, item) per line)\n"
        "toy: prepared: 6 users, 10 items, 30 interactions, avg length 5.00, density 50.0%\n"
    )
    assert main(["data", "stats", "toy"]) == 0
    out = capsys.readouterr().out
    assert "6 of 6 users (100.0%) have 3+ interactions" in out and "Bayes-optimal" not in out


def test_old_manifest_without_evaluable_users_still_shows_them(tmp_path, isolated_data_root, capsys):
    src = write(tmp_path / "log.txt", PAIRS)
    prepare_dataset("toy", [src])
    path = isolated_data_root / "toy" / "manifest.json"
    manifest = json.loads(path.read_text())
    del manifest["statistics"]["evaluable_users"]  # as written by an earlier version
    path.write_text(json.dumps(manifest))
    assert main(["data", "stats", "toy", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["evaluable_users"] == 6


@pytest.mark.parametrize("name", ["synthetic", "synthetic-clusters"])
def test_generated_datasets_record_generator_and_optimum(isolated_data_root, capsys, name):
    data = load_dataset(name)
    manifest = data.manifest
    source = manifest["sources"][0]
    assert source["generator"].startswith("modsar.data.synthetic.") and source["seed"] == 0
    assert manifest["optimum"]["ks"] == [1, 5, 10, 20, 50] and manifest["optimum"]["filter_seen"] == "none"
    for which in ("valid", "test"):
        opt = manifest["optimum"][which]
        assert 0 < opt["ndcg@1"] < opt["ndcg@10"] < opt["recall@10"] < opt["recall@50"] <= 1
    assert main(["data", "stats", name]) == 0
    shown = f"Bayes-optimal  test NDCG@10 {manifest['optimum']['test']['ndcg@10']:.4f}"
    assert shown in capsys.readouterr().out
    assert main(["data", "list", "--json"]) == 0
    listing = {e["name"]: e for e in json.loads(capsys.readouterr().out)}
    assert listing[name]["prepared"] and "generator" in listing[name]["description"]


def test_stale_generated_dataset_is_regenerated_with_its_options(isolated_data_root):
    """A cached copy made by another generator version is refreshed on use; the user's options are kept."""
    manifest, _ = prepare_dataset("synthetic", max_len=20)
    path = isolated_data_root / "synthetic" / "manifest.json"
    old = json.loads(path.read_text())
    old["sources"][0]["version"] = 1
    del old["optimum"]
    path.write_text(json.dumps(old))
    (isolated_data_root / "synthetic" / "interactions.parquet").unlink()  # the old data is not read
    data = load_dataset("synthetic")
    assert data.manifest["sources"] == manifest["sources"] and data.manifest["max_len"] == 20
    assert data.manifest["optimum"] == manifest["optimum"]
    assert len(data.item) == manifest["statistics"]["interactions"]
    user_file = isolated_data_root.parent / "mine.txt"
    user_file.write_text(PAIRS)
    prepare_dataset("synthetic", [user_file], force=True)  # a user's own file under that name is left alone
    assert load_dataset("synthetic").num_users == 6


def test_cli_refuses_data_nothing_can_be_trained_on(tmp_path, isolated_data_root, capsys):
    # Every user has exactly 3 interactions: after holding out validation and test, one training item each.
    src = write(tmp_path / "three.txt", "1 1\n1 2\n1 3\n2 4\n2 5\n2 6\n")
    assert main(["data", "prepare", "three", "--source", str(src)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert (
        len(err) == 1
        and str(src) in err[0]
        and "nothing to train on" in err[0]
        and "4+ interactions" in err[0]
    )
    assert written(isolated_data_root) == []


def test_density_counts_interactions_so_repeats_can_exceed_100_percent():
    """The papers' interactions / (users x items): 4 users who each rate 5 items 40 times over fill the matrix
    40 times (4000%), the figure `data stats` shows; the definition no longer promises a fraction in [0,
    1]."""
    from modsar.data.prepare import density, statistics

    assert density(800, 4, 5) == 40.0
    assert density_text({"interactions": 800, "users": 4, "items": 5}) == "4000%"
    assert statistics(np.repeat(np.arange(1, 5), 200), 4, 5)["density"] == 40.0
    assert "[0, 1]" not in (density.__doc__ or "") and "above 1" in (density.__doc__ or "")


@pytest.mark.parametrize("max_len", ["-5", "0", "100000000000"])
def test_a_max_len_no_model_can_have_is_refused_before_importing(tmp_path, capsys, max_len):
    source = write(tmp_path / "pairs.txt", "".join(f"{u} {i}\n" for u in (1, 2) for i in (5, 6, 7, 8)))
    assert (
        main(["data", "prepare", "px", "--source", str(source), "--format", "pairs", "--max-len", max_len])
        == 2
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert (
        len(err) == 1 and "--max-len must be between 1 and 1,048,576" in err[0] and err[0].endswith(max_len)
    )
    assert not list(tmp_path.rglob("manifest.json"))
