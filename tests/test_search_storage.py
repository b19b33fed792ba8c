"""The filesystem Tune writes a local search through: a file is whole or absent, whenever its writer dies."""

from __future__ import annotations

import json
import pickle
import signal
import subprocess
import sys

import pyarrow.fs as pafs
import pytest

from modsar.outputs import PARTIAL_PREFIX
from modsar.sweep.storage import (
    is_local_search_filesystem,
    remove_partial_files,
    search_filesystem,
    whole_experiment_state,
)

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
    target = tmp_path / "tuner.pkl"
    for content in (b"first", b"second, longer than the first"):
        with fs.open_output_stream(str(target)) as out:
            out.write(content)
        assert target.read_bytes() == content
    assert [p.name for p in target.parent.iterdir()] == ["tuner.pkl"]


def test_a_write_that_fails_keeps_the_previous_file_and_its_mode(tmp_path):
    """pyarrow closes a stream whatever ended its `with` block (Tune writes tuner.pkl so): a write that raised
    must not rename half a file into place; one that ends replaces the file and keeps its permissions."""
    fs = search_filesystem(str(tmp_path))
    target = tmp_path / "tuner.pkl"
    target.write_bytes(b"whole")
    target.chmod(0o600)
    with pytest.raises(OSError, match="disk full"), fs.open_output_stream(str(target)) as out:
        out.write(b"half")
        raise OSError("disk full")
    assert target.read_bytes() == b"whole" and [p.name for p in tmp_path.iterdir()] == ["tuner.pkl"]
    with fs.open_output_stream(str(target)) as out:
        out.write(b"new")
    assert target.read_bytes() == b"new" and target.stat().st_mode & 0o777 == 0o600
    fs.copy_file(str(target), str(tmp_path / "copy.pkl"))
    assert (tmp_path / "copy.pkl").read_bytes() == b"new"
    with pytest.raises(FileNotFoundError):
        fs.copy_file(str(tmp_path / "missing"), str(target))
    assert target.read_bytes() == b"new" and sorted(p.name for p in tmp_path.iterdir()) == [
        "copy.pkl",
        "tuner.pkl",
    ]


def test_tunes_controller_writes_its_experiment_state_whole_while_a_search_runs(tmp_path):
    """Tune 2.60 rewrites experiment_state-*.json in place in its staging folder (a copy running from the
    previous save could read it half written); during a search that one `open` writes a temporary file and
    renames it. Should a Tune release write it elsewhere, this test fails and the guard needs moving."""
    import inspect

    from ray.tune.execution import tune_controller

    source = inspect.getsource(tune_controller)
    assert source.count("open(") == 1 and "open(" in inspect.getsource(
        tune_controller.TuneController.save_to_dir
    )
    state = tmp_path / "experiment_state-1.json"
    state.write_text('{"trial_data": [1]}')
    with whole_experiment_state():
        with tune_controller.open(state, "w") as out:  # what save_to_dir does, as it does it
            json.dump({"trial_data": [1, 2]}, out)
            assert state.read_text() == '{"trial_data": [1]}'  # the old state, whole, until the block ends
        assert json.loads(state.read_text()) == {"trial_data": [1, 2]}
        with pytest.raises(TypeError), tune_controller.open(state, "w") as out:
            json.dump({"trial_data": [object()]}, out)  # fails after writing a part
        assert json.loads(state.read_text()) == {"trial_data": [1, 2]}
        assert tune_controller.open(state).read() == '{"trial_data": [1, 2]}'  # reads are the builtin's
    assert "open" not in vars(tune_controller)  # afterwards Tune is as it was
    assert [p.name for p in tmp_path.iterdir()] == [state.name]


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
    # by this name, in tuner.pkl too: a search started before a rename could not be resumed after it
    assert b"modsar.sweep.storage" in pickle.dumps(fs) and b"AtomicLocalHandler" in pickle.dumps(fs)
    assert is_local_search_filesystem(fs) and not is_local_search_filesystem(pafs.LocalFileSystem())
    assert fs.type_name == "py::modsar-atomic-local"
    assert search_filesystem("s3://bucket/results") is None  # an object store's upload is whole already
