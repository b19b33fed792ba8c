"""Training speed and peak memory of ModSAR against a public SASRec implementation, pmixer/SASRec.pytorch
(https://github.com/pmixer/SASRec.pytorch), on the same data and the same model, on CPU.

Why: ModSAR's own speed benchmarks (epoch_time.py, ce_speed.py) compare ModSAR with itself. This one asks
whether a SASRec trained by ModSAR costs more time or memory per epoch than the widely used standalone
PyTorch SASRec. Each run is its own subprocess, and runs alternate A B B A over the rounds, so machine load
and warm-up hit both sides alike. One Parquet row per run (--rows).

The peer is never copied into this repository. Get it from a public clone, outside the repository:

    git clone https://github.com/pmixer/SASRec.pytorch /tmp/sasrec-peer
    # or, from any clone or mirror (then pass --peer-commit, as an archive carries no commit):
    mkdir /tmp/sasrec-peer && git --git-dir=CLONE/.git archive HEAD python/main.py python/model.py \
        python/utils.py | tar -x -C /tmp/sasrec-peer

--peer takes the clone's root (its python/ folder holds main.py, model.py and utils.py) or that python/
folder itself. The script copies those three files into a temporary folder, writes the dataset there as the
peer's data/<name>.txt ("user item" lines, 1-based ids, each user's items in time order, from the ModSAR
prepared dataset), and runs `python -u main.py ... --device cpu` from there. Full measurement (Amazon Video
Games, the SASRec paper's Video; run it on an otherwise idle machine):

    nice -n 5 .venv/bin/python benchmarks/peer_speed.py --peer /tmp/sasrec-peer --dataset video \
        --rounds 2 --epochs 5 --threads 2 --rows results/peer-speed/video.parquet

A quick check: --dataset ml-100k --epochs 2 --rounds 1 --threads 1. Needs psutil (the test extra).

The peer needs no patch at its commit fde8a9c (March 2026) with torch 2.13: its command-line options cover
everything; the peer_patch column says "none". Settings, on both sides: hidden 64, 2 blocks, 1 head, dropout
0.2 (embeddings, attention probabilities, feed-forward inner and output), max length 50, batch 128, Adam lr
1e-3 with betas (0.9, 0.98), no weight decay, BCE with one sampled negative per position, inner
feed-forward width = hidden (the peer's two 1x1 convolutions), ReLU, LayerNorm eps 1e-8, xavier_normal
init, items scaled by sqrt(d), learned positions counted back from the last slot, every batch max-len wide
(ModSAR: data.padding_free=false). --norm pre (the default) is the peer's --norm_first against ModSAR's
model.norm=pre: the same network, block for block, final LayerNorm included; ModSAR has d more parameters,
its item table's mask row (N + 2 rows against N + 1). --norm post is the peer's default block (post-LN plus
a final LayerNorm) against ModSAR's post-LN, which has no final LayerNorm: d fewer parameters in all.

Measures. ModSAR: its row's epoch_time_s (the mean time of its training epochs, setup and evaluation
excluded) and num_parameters; it validates and tests once, after its last epoch (train.eval_every =
--epochs). Peer: the parent stamps every line the peer prints (one per training step, unbuffered); epoch e
lasts from the last step line of epoch e - 1 to its own last step line, epoch 1 from the line the peer prints
just before it builds its sampler, model and optimizer; so the peer's first epoch carries that setup (a
sampler fork and a small model, about 0.2 s on 2 cores), as ModSAR's carries none of its own. torch's
optimizers import torch._dynamo on first construction (1.8 s here), which ModSAR pays in its setup; the peer's
main.py therefore runs, unchanged, through runpy after `import torch._dynamo` (the peer_launch column), so
that import does not land in its first epoch. epoch_times_s lists the peer's epochs (drop the first for a
steady state). The peer evaluates only at every 20th epoch, so --epochs stays below 20 and no evaluation
falls inside the timed epochs. Its parameter count is read from the state dict it saves at the end.
Peak RSS: the kernel's peak resident set of the training process (/usr/bin/time -v when present, else
polled); peak_tree_pss_mb: the largest polled sum of proportional set sizes over the whole process tree
(the peer's three sampler processes included, shared pages counted once). Both sides get OMP_NUM_THREADS =
MKL_NUM_THREADS = --threads (the peer never calls torch.set_num_threads); ModSAR also gets train.threads.

What stays unequal (the script cannot remove it without patching the peer):
- the peer builds batches in three sampler processes (hard-coded n_workers=3) beside the training process;
  ModSAR builds them in the training process. With --threads below the core count the peer's sampling runs
  on otherwise idle cores; --cpus pins both process trees to the same cores;
- the peer draws negatives outside the user's training items (rejection sampling), ModSAR uniformly;
- the peer computes its item-table L2 term every step even at l2_emb=0 (a sum of squares and its backward),
  scores every position before masking out padding, and prints one line per step;
- an epoch: the peer draws ceil(U / B) full batches of users (wrapping around), ModSAR one row per user with
  at least two training items;
- ModSAR's peak memory includes its one validation and test pass (full ranking) and its larger imports; the
  peer's includes no evaluation. The peer's samplers fork after the launcher's torch._dynamo import, so they
  share those pages (PSS splits them) where without it only the training process would hold them.
ModSAR's own default batching (padding-free, token-budget batches) is one option away:
--modsar-set data.padding_free=true --modsar-set data.batching=tokens (recorded in modsar_overrides).
"""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import itertools
import json
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from importlib import metadata
from pathlib import Path

import pandas as pd
import psutil

from modsar.data.store import load_dataset
from modsar.outputs import atomic_write

PEER_FILES = ("main.py", "model.py", "utils.py")
PEER_PATCH = "none"  # the peer runs unchanged; a patch applied to the temporary copy would be named here
PEER_EVAL_EVERY = 20  # the peer's main.py evaluates (inside its epoch loop) at every 20th epoch
STEP_LINE = re.compile(r"^loss in epoch (\d+) iteration (\d+):")
SETUP_LINE = "average sequence length"  # printed just before the peer builds its sampler and model
# main.py unchanged, run after the lazy import torch's first optimizer would otherwise do inside epoch 1
PEER_LAUNCH = (
    "import runpy, sys, torch._dynamo; sys.argv = sys.argv[1:]; "
    "runpy.run_path(sys.argv[0], run_name='__main__')"
)
TIME_BIN = "/usr/bin/time"
POLL_S = 0.25
MB = 1024 * 1024
COUNT_PARAMETERS = (
    "import sys, torch; state = torch.load(sys.argv[1], map_location='cpu'); "
    "print(sum(t.numel() for t in state.values()))"
)


@dataclass(frozen=True)
class Settings:
    """The model and training settings both sides share; every field becomes a column."""

    dataset: str
    hidden_size: int
    num_blocks: int
    num_heads: int
    dropout: float
    max_len: int
    batch_size: int
    lr: float
    epochs: int
    threads: int
    norm: str


@dataclass
class Usage:
    """What one child process tree used."""

    wall_s: float
    peak_rss_mb: float
    rss_source: str
    peak_tree_pss_mb: float
    max_processes: int


@dataclass
class Child:
    """A finished child: its stamped stdout lines, its stderr, and its usage."""

    lines: list[tuple[float, str]]
    stderr: str
    returncode: int
    usage: Usage


class TreePoller(threading.Thread):
    """Polls a process tree: the peak RSS of its main process and the peak PSS summed over the tree."""

    def __init__(self, root: int, wrapped: bool) -> None:
        super().__init__(daemon=True)
        self.root, self.wrapped = psutil.Process(root), wrapped
        self.stop = threading.Event()
        self.main_rss = self.tree_pss = 0
        self.max_processes = 0

    def run(self) -> None:
        while not self.stop.is_set():
            try:
                tree = self.root.children(recursive=True)
                if not self.wrapped:  # under /usr/bin/time the root is time itself, not measured
                    tree.insert(0, self.root)
                main = (self.root.children() or [None])[0] if self.wrapped else self.root
            except psutil.Error:
                break
            pss = 0
            for proc in tree:
                try:
                    pss += proc.memory_full_info().pss
                    if proc == main:
                        self.main_rss = max(self.main_rss, proc.memory_info().rss)
                except psutil.Error:
                    continue
            self.tree_pss = max(self.tree_pss, pss)
            self.max_processes = max(self.max_processes, len(tree))
            self.stop.wait(POLL_S)


def run_child(
    cmd: list[str], cwd: Path, env: dict[str, str], cpus: list[int] | None, timeout_s: float
) -> Child:
    """Run `cmd` (under /usr/bin/time -v where present), stamping each stdout line as it arrives."""
    scratch = Path(tempfile.mkdtemp(prefix="peer-speed-child-"))
    time_report = scratch / "time.txt"
    wrapped = os.access(TIME_BIN, os.X_OK)
    full = [TIME_BIN, "-v", "-o", str(time_report), *cmd] if wrapped else cmd
    pin: Callable[[], None] | None = (lambda: os.sched_setaffinity(0, cpus)) if cpus else None
    started = time.perf_counter()
    with open(scratch / "stderr.txt", "w+") as err:
        proc = subprocess.Popen(
            full,
            cwd=cwd,
            env=env,
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
            bufsize=1,
            start_new_session=True,  # its own process group: a timeout ends it and its sampler processes
            preexec_fn=pin,
        )
        poller = TreePoller(proc.pid, wrapped)
        poller.start()
        watchdog = threading.Timer(timeout_s, lambda: os.killpg(proc.pid, 9))
        watchdog.start()
        assert proc.stdout is not None
        lines = [(time.perf_counter(), line.rstrip("\n")) for line in proc.stdout]
        returncode = proc.wait()
        wall = time.perf_counter() - started
        watchdog.cancel()
        poller.stop.set()
        poller.join()
        err.seek(0)
        stderr = err.read()
    peak_rss, source = poller.main_rss / MB, f"psutil poll every {POLL_S} s"
    if wrapped and time_report.is_file():
        found = re.search(r"Maximum resident set size \(kbytes\): (\d+)", time_report.read_text())
        if found:
            peak_rss, source = int(found.group(1)) / 1024, "/usr/bin/time -v"
    shutil.rmtree(scratch, ignore_errors=True)
    usage = Usage(wall, peak_rss, source, poller.tree_pss / MB, poller.max_processes)
    return Child(lines, stderr, returncode, usage)


def checked(child: Child, what: str) -> Child:
    if child.returncode:
        tail = "\n".join(line for _, line in child.lines[-20:])
        sys.exit(f"{what} failed (exit {child.returncode}):\n{tail}\n{child.stderr[-3000:]}")
    return child


def child_env(threads: int) -> dict[str, str]:
    env = dict(os.environ)
    env.update(OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads), PYTHONUNBUFFERED="1")
    return env


def modsar_overrides(s: Settings) -> list[str]:
    """ModSAR's closest equal of the peer's SASRec (see the module docstring)."""
    return [
        "task=ar",
        "model.backbone=modular",
        f"model.hidden_size={s.hidden_size}",
        f"model.num_layers={s.num_blocks}",
        f"model.num_heads={s.num_heads}",
        f"model.ffn_size={s.hidden_size}",
        "model.activation=relu",
        f"model.norm={s.norm}",
        "model.norm_eps=1e-8",
        "model.init=xavier",
        "model.positional=learned",
        "model.positions_from=end",
        "model.scale_embedding=true",
        f"model.dropout={s.dropout}",
        f"model.attn_dropout={s.dropout}",
        "model.attn_output_dropout=false",
        "model.ffn_inner_dropout=true",
        "loss.name=bce",
        "loss.num_negatives=1",
        f"data.max_len={s.max_len}",
        f"data.batch_size={s.batch_size}",
        "data.padding_free=false",
        "data.samples=sequences",
        "train.optimizer=adam",
        f"train.lr={s.lr}",
        "train.beta2=0.98",
        "train.weight_decay=0",
        f"train.max_epochs={s.epochs}",
        f"train.eval_every={s.epochs}",
        "train.patience=0",
        f"train.threads={s.threads}",
        "train.device=cpu",
        "train.precision=fp32",
        "eval.ks=[10]",
    ]


def peer_args(s: Settings, data_name: str, train_dir: str) -> list[str]:
    """The peer's main.py options for the same settings (its argparse; l2_emb 0 is its default)."""
    args = [
        *("--dataset", data_name, "--train_dir", train_dir, "--device", "cpu"),
        *("--batch_size", str(s.batch_size), "--lr", str(s.lr), "--maxlen", str(s.max_len)),
        *("--hidden_units", str(s.hidden_size), "--num_blocks", str(s.num_blocks)),
        *("--num_heads", str(s.num_heads), "--dropout_rate", str(s.dropout), "--l2_emb", "0"),
        *("--num_epochs", str(s.epochs)),
    ]
    return [*args, "--norm_first"] if s.norm == "pre" else args


def run_modsar(
    s: Settings,
    extra: list[str],
    workdir: Path,
    data_dir: str | None,
    cpus: list[int] | None,
    timeout_s: float,
) -> dict:
    """One `modsar train`; its epoch time and parameter count come from its own row."""
    exe = Path(sys.executable).with_name("modsar")
    cmd = [str(exe) if exe.is_file() else "modsar", "train", "--dataset", s.dataset]
    cmd += ["--results", str(workdir / "modsar-results"), "--experiment", "peer-speed"]
    cmd += ["--no-checkpoint", "--json", "--quiet", *(["--data-dir", data_dir] if data_dir else [])]
    child = checked(
        run_child([*cmd, *modsar_overrides(s), *extra], workdir, child_env(s.threads), cpus, timeout_s),
        "modsar train",
    )
    out = "\n".join(line for _, line in child.lines)
    row = json.loads(out[out.index("{") :])
    return {
        "s_per_epoch": row["epoch_time_s"],
        "epoch_times_s": None,  # ModSAR records the mean only
        "num_parameters": row["num_parameters"],
        "steps_per_epoch": row["steps_per_epoch"],
        "eval_time_s": row["eval_time_s"],
        **asdict(child.usage),
    }


def peer_epoch_times(lines: list[tuple[float, str]], epochs: int) -> tuple[list[float], list[int]]:
    """Seconds and steps of each peer epoch, from the stamps of its step lines (see the module docstring)."""
    start = next((t for t, line in lines if line.startswith(SETUP_LINE)), None)
    last: dict[int, float] = {}
    steps: dict[int, int] = {}
    for t, line in lines:
        step = STEP_LINE.match(line)
        if step:
            epoch = int(step.group(1))
            last[epoch], steps[epoch] = t, steps.get(epoch, 0) + 1
    if start is None or sorted(last) != list(range(1, epochs + 1)):
        sys.exit(f"the peer's output did not show {epochs} epochs of step lines; is --peer SASRec.pytorch?")
    ends = [start] + [last[e] for e in range(1, epochs + 1)]
    return [b - a for a, b in itertools.pairwise(ends)], [steps[e] for e in range(1, epochs + 1)]


def run_peer(
    s: Settings, peer_dir: Path, data_name: str, tag: str, cpus: list[int] | None, timeout_s: float
) -> dict:
    """One peer training run in the temporary copy; its parameter count from the state dict it saves."""
    cmd = [sys.executable, "-u", "-c", PEER_LAUNCH, "main.py", *peer_args(s, data_name, tag)]
    child = checked(run_child(cmd, peer_dir, child_env(s.threads), cpus, timeout_s), "the peer's main.py")
    times, steps = peer_epoch_times(child.lines, s.epochs)
    saved = sorted((peer_dir / f"{data_name}_{tag}").glob(f"SASRec.epoch={s.epochs}.*.pth"))
    if not saved:
        sys.exit(f"the peer saved no state dict under {peer_dir / f'{data_name}_{tag}'}")
    count = subprocess.run(
        [sys.executable, "-c", COUNT_PARAMETERS, str(saved[-1])],
        env=child_env(1),
        capture_output=True,
        text=True,
        check=True,
    )
    return {
        "s_per_epoch": statistics.mean(times),
        "epoch_times_s": json.dumps([round(t, 4) for t in times]),
        "num_parameters": int(count.stdout.split()[-1]),
        "steps_per_epoch": statistics.mean(steps),
        "eval_time_s": None,
        **asdict(child.usage),
    }


def peer_sources(peer: Path) -> Path:
    """The folder holding the peer's main.py, model.py and utils.py: `peer` or its python/ subfolder."""
    for folder in (peer / "python", peer):
        if all((folder / name).is_file() for name in PEER_FILES):
            return folder
    sys.exit(f"--peer {peer}: no {', '.join(PEER_FILES)} there or in its python/ folder")


def peer_commit(peer: Path, given: str | None) -> str:
    """`given`, else the HEAD of `peer` where `peer` is the top of a git clone (not inside another one)."""
    if given:
        return given
    done = subprocess.run(
        ["git", "-C", str(peer), "rev-parse", "--show-toplevel", "HEAD"], capture_output=True, text=True
    )
    lines = done.stdout.split()
    if done.returncode or len(lines) != 2 or Path(lines[0]).resolve() != peer.resolve():
        return "unknown"
    return lines[1]


def files_sha256(folder: Path) -> str:
    digest = hashlib.sha256()
    for name in PEER_FILES:
        digest.update((folder / name).read_bytes())
    return digest.hexdigest()


def write_peer_data(dataset: str, data_dir: str | None, target: Path) -> tuple[int, int, int]:
    """The prepared dataset as the peer's "user item" lines (1-based, each user's items in time order)."""
    data = load_dataset(dataset, data_dir)
    users = len(set(data.user.tolist()))
    if users != data.num_users or int(data.user.min()) != 1 or int(data.item.min()) < 1:
        sys.exit(f"dataset '{dataset}' does not have dense 1-based users, as the peer's reader needs")
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target, "w") as out:
        out.writelines(f"{u} {i}\n" for u, i in zip(data.user.tolist(), data.item.tolist(), strict=True))
    return data.num_users, data.num_items, len(data.user)


def summarise(frame: pd.DataFrame) -> None:
    means = frame.groupby("implementation")[["s_per_epoch", "peak_rss_mb", "peak_tree_pss_mb"]].mean()
    params = frame.groupby("implementation")["num_parameters"].first()
    first = frame.iloc[0]
    print(
        f"\n{first['dataset']}, {first['threads']} threads, {first['epochs']} epochs/run, "
        f"{frame['round'].max() + 1} rounds alternated, norm={first['norm']}"
    )
    print(f"{'':8} {'s/epoch':>9} {'peak RSS MB':>12} {'tree PSS MB':>12} {'parameters':>11}")
    for name in ("modsar", "peer"):
        row = means.loc[name]
        print(
            f"{name:8} {row['s_per_epoch']:9.2f} {row['peak_rss_mb']:12.0f} {row['peak_tree_pss_mb']:12.0f} "
            f"{params[name]:11,d}"
        )
    ratio = means.loc["modsar"] / means.loc["peer"]
    print(
        f"ModSAR / peer: s/epoch {ratio['s_per_epoch']:.2f}, peak RSS {ratio['peak_rss_mb']:.2f}, "
        f"tree PSS {ratio['peak_tree_pss_mb']:.2f}"
    )


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--peer", required=True, type=Path, help="a SASRec.pytorch checkout (see above)")
    parser.add_argument("--peer-commit", help="the peer's commit, where --peer is no git clone")
    parser.add_argument("--dataset", default="video", help="a prepared ModSAR dataset (modsar data list)")
    parser.add_argument("--data-dir", help="prepared-datasets folder (default: ModSAR's)")
    parser.add_argument("--rounds", type=int, default=2, help="each round runs both once; the order flips")
    parser.add_argument("--epochs", type=int, default=5, help=f"epochs per run, below {PEER_EVAL_EVERY}")
    parser.add_argument("--threads", type=int, default=2, help="torch threads of each side")
    parser.add_argument("--cpus", help="pin every child process tree to these cores, e.g. 0 or 0,1")
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--blocks", type=int, default=2)
    parser.add_argument("--heads", type=int, default=1)
    parser.add_argument("--dropout", type=float, default=0.2)
    parser.add_argument("--max-len", type=int, default=50)
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--norm", choices=("pre", "post"), default="pre", help="the block (see above)")
    parser.add_argument(
        "--modsar-set", action="append", default=[], metavar="KEY=VALUE", help="extra ModSAR override"
    )
    parser.add_argument("--timeout", type=float, default=7200, help="seconds one run may take")
    parser.add_argument("--rows", type=Path, help="write one Parquet row per run here")
    args = parser.parse_args()
    if not 1 <= args.epochs < PEER_EVAL_EVERY:
        parser.error(f"--epochs must be 1..{PEER_EVAL_EVERY - 1}: the peer evaluates inside every 20th epoch")
    return args


def main() -> None:
    args = parse_args()
    cpus = [int(c) for c in args.cpus.split(",")] if args.cpus else None
    sources = peer_sources(args.peer.expanduser().resolve())
    s = Settings(
        args.dataset,
        args.hidden,
        args.blocks,
        args.heads,
        args.dropout,
        args.max_len,
        args.batch_size,
        args.lr,
        args.epochs,
        args.threads,
        args.norm,
    )
    fixed = {
        "peer_commit": peer_commit(args.peer, args.peer_commit),
        "peer_files_sha256": files_sha256(sources),
        "peer_patch": PEER_PATCH,
        "peer_launch": PEER_LAUNCH,
        "modsar_overrides": " ".join(args.modsar_set),
        "torch": metadata.version("torch"),
        "modsar": metadata.version("modsar"),
        "python": sys.version.split()[0],
        "host": socket.gethostname(),
        "cpus": args.cpus or ",".join(map(str, sorted(os.sched_getaffinity(0)))),
    }
    data_name = re.sub(r"[^A-Za-z0-9_.-]", "_", args.dataset)
    rows = []
    with tempfile.TemporaryDirectory(prefix="peer-speed-") as tmp:
        work = Path(tmp)
        peer_dir = work / "peer"
        peer_dir.mkdir()
        for name in PEER_FILES:
            shutil.copy2(sources / name, peer_dir / name)
        users, items, interactions = write_peer_data(
            args.dataset, args.data_dir, peer_dir / "data" / f"{data_name}.txt"
        )
        print(f"{args.dataset}: {users:,} users, {items:,} items, {interactions:,} interactions", flush=True)
        for r in range(args.rounds):
            order = ("modsar", "peer") if r % 2 == 0 else ("peer", "modsar")
            for position, name in enumerate(order):
                started = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
                if name == "modsar":
                    measured = run_modsar(s, args.modsar_set, work, args.data_dir, cpus, args.timeout)
                else:
                    measured = run_peer(s, peer_dir, data_name, f"round{r}", cpus, args.timeout)
                rows.append(
                    {
                        "implementation": name,
                        "round": r,
                        "position": position,
                        "started_at": started,
                        **asdict(s),
                        "users": users,
                        "items": items,
                        "interactions": interactions,
                        **measured,
                        **fixed,
                    }
                )
                print(
                    f"round {r + 1} {name:6}: {measured['s_per_epoch']:.2f} s/epoch, "
                    f"peak RSS {measured['peak_rss_mb']:.0f} MB, "
                    f"tree PSS {measured['peak_tree_pss_mb']:.0f} MB, "
                    f"{measured['num_parameters']:,} parameters, {measured['steps_per_epoch']:g} steps/epoch",
                    flush=True,
                )
    frame = pd.DataFrame(rows)
    if args.rows:
        with atomic_write(args.rows) as path:
            frame.to_parquet(path, index=False)
        print(f"rows: {args.rows}")
    summarise(frame)


if __name__ == "__main__":
    main()
