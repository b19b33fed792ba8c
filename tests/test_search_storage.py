"""The filesystem Tune writes a local search through: a file is whole or absent, whenever its writer dies."""

from __future__ import annotations

import pickle
import signal
import subprocess
import sys

import pyarrow.fs as pafs
import pytest

from modsar.outputs import PARTIAL_PREFIX
from modsar.sweep.storage import remove_partial_files, search_filesystem

WRITER = """
import sys, time
import pyarrow.fs as pafs
from modsar.sweep.storage import search_filesystem
target, kind = sys.argv[1], sys.argv[2]
fs = search_filesystem(target) if kind == "search" else pafs.LocalFileSystem()
with fs.open_output_stream(target) as out:
    out.write(b"the new state, half")
    out.flush()
    print("half", flush=True)
    time.sleep(120)
    out.write(b" and the rest")
"""


def _killed_mid_write(target, kind: str) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(target), kind], stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout.readline().strip() == "half"
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()


@pytest.mark.parametrize("kind", ["local", "search"])
def test_a_writer_killed_mid_write_leaves_the_previous_file_whole(tmp_path, kind):
    """What a kill inside Tune's state copy did to a search (pyarrow's local filesystem truncates, then
    writes), what the search filesystem leaves: the previous file, and a partial --resume deletes."""
    target = tmp_path / "ray-ar" / "callback-states-1.pkl"
    target.parent.mkdir()
    target.write_bytes(b"the old state, whole")
    _killed_mid_write(target, kind)
    partial = list(target.parent.glob(f"{PARTIAL_PREFIX}*"))
    if kind == "local":
        assert target.read_bytes() == b"the new state, half" and not partial
        return
    assert target.read_bytes() == b"the old state, whole"
    assert len(partial) == 1  # what the writer had written, under a hidden name
    assert remove_partial_files(str(tmp_path / "ray-ar")) == 1
    assert sorted(p.name for p in target.parent.iterdir()) == [target.name]


def test_a_file_written_whole_replaces_the_old_one(tmp_path):
    fs = search_filesystem(str(tmp_path))
    target = tmp_path / "deep" / "er" / "tuner.pkl"  # folders made, as pyarrow's local filesystem makes them
    for content in (b"first", b"second, longer than the first"):
        with fs.open_output_stream(str(target)) as out:
            out.write(content)
        assert target.read_bytes() == content
    assert [p.name for p in target.parent.iterdir()] == ["tuner.pkl"]


def test_a_torn_copy_of_the_experiment_state_keeps_the_previous_one(tmp_path):
    """Tune rewrites experiment_state-*.json in place while a copy from its previous save may still run: a
    copy that read it half rewritten does not parse, and must not replace the whole one."""
    fs = search_filesystem(str(tmp_path))
    state = tmp_path / "experiment_state-2026.json"
    with fs.open_output_stream(str(state)) as out:
        out.write(b'{"trial_data": [1, 2]}')
    with fs.open_output_stream(str(state)) as out:
        out.write(b'{"trial_data": [1, 2, ')
    assert state.read_bytes() == b'{"trial_data": [1, 2]}'
    assert [p.name for p in tmp_path.iterdir()] == [state.name]
    other = tmp_path / "basic-variant-state-2026.json"  # a pickle, whatever its name: not parsed
    with fs.open_output_stream(str(other)) as out:
        out.write(b"\x80\x05not json")
    assert other.read_bytes() == b"\x80\x05not json"


def test_a_folder_copies_through_it_as_tunes_syncer_copies_it(tmp_path):
    source = tmp_path / "staging"
    (source / "trial_0" / "checkpoint_000001").mkdir(parents=True)
    files = {
        "experiment_state-1.json": b'{"a": 1}',
        "trial_0/result.json": b'{"epoch": 1}\n{"epoch": 2}\n',
        "trial_0/checkpoint_000001/best.pt": bytes(range(256)) * 9000,  # over pyarrow's copy chunk
    }
    for name, content in files.items():
        (source / name).write_bytes(content)
    target = tmp_path / "results" / "ray-ar"
    pafs.copy_files(str(source), str(target), destination_filesystem=search_filesystem(str(target)))
    copied = {str(p.relative_to(target)): p.read_bytes() for p in target.rglob("*") if p.is_file()}
    assert copied == files


def test_it_travels_to_trial_actors_and_stays_out_of_object_stores(tmp_path):
    fs = search_filesystem(str(tmp_path))
    assert pickle.loads(pickle.dumps(fs)).equals(fs)  # Tune pickles it into every trial's storage context
    assert fs.type_name == "py::modsar-atomic-local"
    assert search_filesystem("s3://bucket/results") is None  # an object store's upload is whole already
