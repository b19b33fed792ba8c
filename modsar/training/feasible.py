"""Whether a configuration can run on a dataset, here: the checks that need the dataset's sizes (sampled
negatives, rollouts) and this machine's memory. `modsar train`, a search's space check and `modsar evaluate`
run the same rule, before any model is trained; config.validate holds the checks that need no data.
`validate_split` adds what training alone needs of the split."""

from __future__ import annotations

from typing import Any

from modsar import memory
from modsar.config import Config
from modsar.data.split import LeaveOneOut, rollout_targets
from modsar.errors import ModsarError
from modsar.evaluation.ranking import negative_room
from modsar.evaluation.rollouts import resolve_exclude, step_limit


def validate_for_dataset(
    cfg: Config,
    num_items: int,
    where: str = "config",
    split: Any = None,
    sizes: dict[str, int] | None = None,
    max_len: int = 0,
) -> None:
    """Checks that need the dataset's size: the same rule for `modsar train` and a search's space check.
    With the dataset's `split` (a LeaveOneOut: `modsar train`, before training), also that the rollouts of
    eval.generate_steps can be made, so a trial never trains only to fail at its test. Last, that the tensors
    the settings size fit in this machine's memory (modsar.memory; where no split is given, a space check's
    `sizes`, the manifest's counts, bound the batches, evaluation and rollouts from below; `max_len`, the
    model's window where known, how many positions a training row labels)."""
    _refuse_trivial_ranking(cfg, num_items, where)
    if cfg.eval.sampled_negatives >= num_items:
        raise ModsarError(
            f"{where}: 'eval.sampled_negatives' ({cfg.eval.sampled_negatives}) must be below the "
            f"number of items ({num_items}); use 0 for full ranking"
        )
    if split is not None and cfg.eval.sampled_negatives:
        for which, name in (("valid", "validation"), ("test", "test")):
            users, history_end, targets = split.targets(which)
            # drawn with replacement: only 0 is too few
            room = negative_room(split, users, history_end, targets)
            if len(room) and room.min() == 0:
                row = int(room.argmin())
                raise ModsarError(
                    f"{where}: 'eval.sampled_negatives' draws each target's negatives from the items "
                    f"its user has not seen, and user {int(users[row]) + 1}'s history before its "
                    f"{name} target, with the target, holds all {split.num_items} items: there is "
                    "nothing to draw; use eval.sampled_negatives=0 (full ranking)"
                )
    if split is not None and cfg.eval.generate_steps:
        users, history_end, _ = split.targets("test")
        index = rollout_targets(history_end)
        # history or none: earlier picks stay allowed, so the limit is 0 or inf
        exclude = resolve_exclude("auto", cfg.eval.filter_seen)
        limit, who, _ = step_limit(split, users[index], history_end[index], exclude)
        if cfg.eval.generate_steps > limit:
            raise ModsarError(
                f"{where}: 'eval.generate_steps' rolls out without each test history's items "
                f"(eval.filter_seen=history), and user {who}'s history before its test target "
                f"holds all {split.num_items} items: nothing is left to pick; use "
                "eval.generate_steps=0 or eval.filter_seen=none"
            )
    memory.refuse(memory.dataset_needs(cfg, num_items, split, sizes, max_len), cfg.train.device, where)


def _refuse_trivial_ranking(cfg: Config, num_items: int, where: str) -> None:
    """A catalogue a ranking cannot tell models apart on: one item (every metric 1.0; a dataset stored
    before `data prepare` refused it), or a monitored recall@k whose k covers every item (1.0 for any model,
    so model selection would pick the first epoch)."""
    if num_items < 2:
        raise ModsarError(
            f"{where}: dataset '{cfg.dataset}' has {num_items} item: every ranking puts it first and every "
            "metric would be 1.0; prepare a log with 2+ items"
        )
    name, _, k = cfg.train.monitor_key.partition("@")
    if name == "recall" and k.isdigit() and int(k) >= num_items:
        raise ModsarError(
            f"{where}: 'train.monitor' {cfg.train.monitor} is 1.0 for every model on dataset "
            f"'{cfg.dataset}', whose {num_items} items all fit in the top {k}; monitor a metric at a k "
            f"below {num_items}, or ndcg@{k}"
        )


def validate_split(cfg: Config, split: LeaveOneOut) -> None:
    """What training needs of the dataset's split besides its sizes: timestamps where the model reads times
    (model.time_bias), and users with a validation and a test target."""
    if cfg.model.timed and split.timestamp is None:
        raise ModsarError(
            f"model.time_bias={cfg.model.time_bias} needs timestamps, and dataset '{cfg.dataset}' has "
            "none (its source gives only the order within each user); use a timestamped dataset or "
            "model.time_bias=none"
        )
    if not len(split.eval_users):
        raise ModsarError(
            f"dataset '{cfg.dataset}' has no user with 3+ interactions: nothing to validate or test"
        )
