"""Steps to escape the popularity plateau: the ModSAR paper's Table 4 model (BERT4Rec-env configs) under the
optimizer, warm-up, weight decay, norm placement and init of its code, one factor at a time.

Each run is one `modsar train` of `benchmarks/configs/video_table4_{ar,ae}.yaml` with the variant's overrides.
Its row records the validation curve, the optimizer steps per epoch, the most-popular ranking's validation
value (`popularity_level`) and `escape_steps`: the steps at the first validation pass at 1.25x that level or
above (docs/training.md). Rows go to results/published/plateau/<experiment>/trials (committed; checkpoints are
not).

    python benchmarks/plateau_study.py run --datasets ml-100k,ml-latest-small --tasks ar,ae --max-steps 600
    python benchmarks/published.py show plateau-runs    # the table of benchmarks/RESULTS.md, from the rows

Runs go two at a time, one thread each (`--parallel`). `--variants` picks a subset (`--list` shows them).
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
from concurrent.futures import ThreadPoolExecutor

ROOT = "results/published/plateau"
CONFIGS = {"ar": "benchmarks/configs/video_table4_ar.yaml", "ae": "benchmarks/configs/video_table4_ae.yaml"}
# The paper's ML-1M settings where they differ from Video's (AR dropout 0.2, AE mask 0.2); the history length
# is the dataset's registry default (ML-100K 50, ML-1M 200), as the configs and the vanilla space leave it
MOVIELENS = {"ar": ["model.dropout=0.2", "model.attn_dropout=0.2"], "ae": ["mask_prob=0.2"]}
# Every variant names all five factors; the configs' own values (since issue 29: BERT-TF AdamW with a 100-step
# warm-up, wd 0.1, post-LN, N(0, 0.02)) are not relied on, so the rows mean the same whatever the configs
# hold.
FACTORS = {
    "train.optimizer": "adamw_bert",
    "train.warmup_steps": "0",
    "train.weight_decay": "0.1",
    "model.norm": "post",
    "model.init": "normal",
}
CHANGES = {
    "bert_adamw": {},  # the configs before issue 29: BERT-TF AdamW (no bias correction), no warm-up
    "bert_adamw_warmup": {"train.warmup_steps": "100"},
    "torch_adamw": {"train.optimizer": "adamw"},
    "torch_adamw_warmup": {"train.optimizer": "adamw", "train.warmup_steps": "100"},
    "bert_adamw_no_decay": {"train.weight_decay": "0.0"},
    "bert_adamw_pre_ln": {"model.norm": "pre"},
    "bert_adamw_bert_init": {"model.init": "truncated_normal"},  # with model.norm_eps=1e-12, below
    "torch_adamw_pre_ln": {"train.optimizer": "adamw", "model.norm": "pre"},
}
VARIANTS = {
    name: [f"{k}={v}" for k, v in {**FACTORS, **change}.items()]
    + (["model.norm_eps=1e-12"] if name == "bert_adamw_bert_init" else [])
    for name, change in CHANGES.items()
}


def run_one(dataset: str, task: str, variant: str, max_steps: int, seed: int) -> str:
    steps_per_epoch = {"ml-100k": 4, "ml-latest-small": 3, "video": 121}.get(dataset, 100)  # batch 256
    epochs = math.ceil(max_steps / steps_per_epoch)
    extra = MOVIELENS[task] if dataset.startswith("ml-") else []
    cmd = [
        "modsar",
        "train",
        "--dataset",
        dataset,
        "--config",
        CONFIGS[task],
        "--results",
        ROOT,
        "--experiment",
        f"plateau-{dataset}",
        "--quiet",
        "--json",
        "train.threads=1",
        f"seed={seed}",
        f"train.max_epochs={epochs}",
        "train.patience=0",
        *extra,
        *VARIANTS[variant],
    ]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if done.returncode:
        return f"{dataset} {task} {variant}: FAILED {done.stderr.strip().splitlines()[-1:]}"
    row = json.loads(done.stdout[done.stdout.index("{") :])
    return (
        f"{dataset} {task} {variant}: escape {row['escape_steps']} steps, best valid "
        f"{row['valid.recall@10']:.4f} (popularity {row['popularity_level']:.4f})"
    )


def variant_of(row) -> str:
    """The variant whose every change the row's config holds, else "other"."""
    for name, changes in VARIANTS.items():
        if all(_matches(row, change) for change in changes):
            return name
    return "other"


def _matches(row, change: str) -> bool:
    key, value = change.split("=", 1)
    try:
        return float(row[key]) == float(value)
    except (TypeError, ValueError):
        return str(row[key]).lower() == value.lower()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("action", choices=["run"])
    parser.add_argument("--datasets", default="ml-100k,ml-latest-small")
    parser.add_argument("--tasks", default="ar,ae")
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--max-steps", type=int, default=600, help="optimizer steps per run (whole epochs)")
    parser.add_argument("--seeds", default="0")
    parser.add_argument("--parallel", type=int, default=2)
    parser.add_argument("--list", action="store_true")
    args = parser.parse_args()
    if args.list:
        for name, changes in VARIANTS.items():
            print(f"{name}: {' '.join(changes)}")
        return
    jobs = [
        (d, t, v, args.max_steps, int(s))
        for s in args.seeds.split(",")
        for d in args.datasets.split(",")
        for t in args.tasks.split(",")
        for v in args.variants.split(",")
    ]
    with ThreadPoolExecutor(args.parallel) as pool:
        for line in pool.map(lambda job: run_one(*job), jobs):
            print(line, flush=True)


if __name__ == "__main__":
    main()
