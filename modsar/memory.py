"""Memory a run will need, estimated from its settings and the dataset's size before any work is done.

Some settings size a tensor in proportion to their value, and a value the machine cannot hold fails only when
that tensor is allocated: after a whole training run (the rollouts of eval.generate_steps), or once the data
and model are built (a batch of sampled negatives). Each estimate here counts tensors the code holds at once,
at sizes it certainly reaches: the labelled positions of an average training batch (the largest has at
least as many; `batch_positions`), the narrowest item vectors a config can give. A refusal therefore never
stops a run that could finish; a run that passes may still find too little memory on a busy machine.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from modsar.errors import ModsarError

if TYPE_CHECKING:
    from modsar.config import Config

# users per rollout batch of eval.generate_steps (modsar.evaluation.rollouts.generate's default)
ROLLOUT_BATCH = 512


@dataclass(frozen=True)
class Need:
    """Bytes that tensors sized by one setting take at once, and where they live."""

    key: str  # the setting, as the user names it: a config key (loss.num_negatives) or a flag (--steps)
    value: int
    what: str  # the tensors, with their shape
    bytes: int
    host: bool  # numpy arrays: in RAM whatever the device
    fix: str
    label: str = ""  # how the message names the setting, where key=value would not say enough

    @property
    def setting(self) -> str:
        if self.label:
            return self.label
        return f"{self.key} {self.value}" if self.key.startswith("--") else f"'{self.key}={self.value}'"


def size(count: float) -> str:
    """Bytes in binary units: "3.2 GiB", "728.0 TiB"."""
    units = ("bytes", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB")
    unit = 0
    while count >= 1024 and unit < len(units) - 1:
        count, unit = count / 1024, unit + 1
    return f"{count:,.0f} bytes" if unit == 0 else f"{count:,.1f} {units[unit]}"


def item_width(cfg: Config) -> int:
    """The item vectors' width: the hidden size, less what the modular backbone gives concatenated users and
    positions (other backbones refuse those settings, so this is never more than their width)."""
    return max(1, cfg.model.item_width)


def parameters_need(cfg: Config, model: Any) -> Need:
    """The model's weights with their gradients and Adam's two moments: 16 bytes a parameter. `model` may be
    built on the meta device (no memory): its parameters have their shapes."""
    count = sum(p.numel() for p in model.parameters())
    m = cfg.model
    return Need(
        "model.hidden_size",
        m.hidden_size,
        f"its {count:,} parameters with their gradients and Adam's two moments",
        16 * count,
        False,
        "use a smaller model.hidden_size, model.ffn_size, model.num_layers or data.max_len",
        f"the model ({m.backbone}, model.hidden_size={m.hidden_size}, model.num_layers={m.num_layers})",
    )


def check_model(cfg: Config, num_items: int, num_users: int, max_len: int, where: str = "config") -> None:
    """Refuses a model too large to train here, counted on the meta device before any of it is allocated."""
    import torch

    from modsar.model import registry

    with torch.device("meta"):
        model = registry.build(cfg, num_items, num_users, max_len)
    refuse([parameters_need(cfg, model)], cfg.train.device, where)


def batch_positions(cfg: Config, split: Any, max_len: int) -> int:
    """The positions the loss reads in the largest training batch, at least: the average batch's, with the
    batches TrainBatches (modsar.data.batches) plans from `split`. Every position of a row is labelled (AR),
    or max(1, round(length x mask_prob)) of them (AE), or its last (data.samples=prefixes); without
    data.padding_free the loss reads all max_len positions of each of batch_size rows. `max_len`: the model's
    window (0 when unknown: one position a row then)."""
    from modsar.data.batches import (
        SORT_CHUNK_BATCHES,
        task_rows,
    )  # TrainBatches' rows (loaded with any split)

    d, layout = cfg.data, task_rows(cfg.task)
    lengths = (split.train_ends - split.starts)[split.train_ends - split.starts >= 2]  # a row: input + label
    if not len(lengths):
        return 1
    prefixes = d.samples == "prefixes"
    rows = int((lengths - 1).sum()) if prefixes else len(lengths)
    if not d.padding_free:  # dense batches: every position of batch_size rows, max_len wide
        return max(1, min(d.batch_size, rows) * (max_len + layout.extra_width if max_len else 1))
    if prefixes or not max_len:
        return max(1, min(d.batch_size, rows))
    labelled = layout.labelled(layout.row_lengths(lengths, max_len), cfg.mask_prob)
    if d.batching == "tokens":  # cut per chunk of 64 x batch_size rows at multiples of an average batch's
        # positions: each chunk gives at most (its positions / budget) + 1 batches, rows / batch_size + 1
        batches = rows // d.batch_size + -(-rows // (SORT_CHUNK_BATCHES * d.batch_size))
    else:  # batch_size rows a batch
        batches = -(-rows // d.batch_size)
    return max(1, labelled // batches)


def training_needs(cfg: Config, num_items: int, positions: int) -> list[Need]:
    """What one training step holds besides the model (`parameters_need`): the batch's negatives or, without
    the fused CE, its positions x items logits. `positions`: the labelled positions of the largest batch, at
    least (`batch_positions`)."""
    width, negatives = item_width(cfg), cfg.loss.num_negatives
    positions = max(1, positions)
    fewer = "use fewer loss.num_negatives or a smaller data.batch_size"
    if cfg.loss.name in ("bce", "bpr", "gbce"):  # per-position negatives: their item vectors gathered
        return [
            Need(
                "loss.num_negatives",
                negatives,
                f"each position's negatives and their item vectors "
                f"({positions:,} positions x {negatives:,} negatives x {width:,} floats)",
                positions * negatives * (8 + 4 * width),
                False,
                f"{fewer} (or loss.name=sampled_ce, whose negatives the batch shares)",
            )
        ]
    if cfg.loss.name == "sampled_ce":  # shared negatives: their scores and the logits beside the target
        return [
            Need(
                "loss.num_negatives",
                negatives,
                f"the negatives' scores and logits ({positions:,} positions x {negatives:,} negatives)",
                4 * positions * (2 * negatives + 1) + negatives * (8 + 4 * width),
                False,
                fewer,
            )
        ]
    if not cfg.loss.fused:  # the plain CE: logits and their log-softmax, positions x items
        return [
            Need(
                "data.batch_size",
                cfg.data.batch_size,
                f"the logits and their log-softmax ({positions:,} positions x {num_items:,} items)",
                8 * positions * num_items,
                False,
                "use loss.fused=true (one chunk of logits at a time) or a smaller data.batch_size",
            )
        ]
    return []


def rollout_needs(
    steps: int,
    rollouts: int,
    batch_size: int,
    num_items: int,
    steps_key: str = "--steps",
    batch_key: str = "--batch-size",
    batch_fix: str = "use a smaller --batch-size",
) -> list[Need]:
    """What `modsar generate` holds: each batch's scores over the catalogue with its ban mask (on the device),
    and the rollouts, their true futures and the step-by-step comparison of the two (rollouts x steps x steps
    booleans, in RAM) from which the alignment metrics are read."""
    batch = max(1, min(batch_size, rollouts))
    fewer = f"use fewer {steps_key}" + (" or --users" if steps_key == "--steps" else "")
    return [
        Need(
            batch_key,
            batch_size,
            f"a batch's scores and ban mask ({batch:,} rollouts x {num_items:,} items)",
            5 * batch * num_items,
            False,
            batch_fix,
        ),
        Need(
            steps_key,
            steps,
            f"the rollouts and their comparison with the true future "
            f"({rollouts:,} rollouts x {steps:,} x {steps:,} steps)",
            rollouts * steps * (16 + steps),
            True,
            fewer,
        ),
    ]


def evaluation_needs(cfg: Config, users: int) -> list[Need]:
    """Sampled evaluation draws its fixed negatives for every evaluated user at once (ids, keys and clash
    flags, in RAM). `users`: evaluated users (a lower bound)."""
    count = cfg.eval.sampled_negatives
    if not count:
        return []
    return [
        Need(
            "eval.sampled_negatives",
            count,
            f"the fixed negatives ({users:,} users x {count:,} items)",
            17 * users * count,
            True,
            "use fewer eval.sampled_negatives (0 ranks every item, in batches)",
        )
    ]


def loo_training_rows(sizes: dict[str, int]) -> int:
    """Training rows of leave-one-out from the manifest's counts, at least: a row needs an input and a label
    besides the two held-out targets (4+ interactions). Every user has them when the shortest does; else the
    users of 3 or fewer hold at most 3 interactions each, so the r others hold the rest: r (max_length - 3)
    >= interactions - 3 users."""
    users, longest = sizes.get("num_users", 0), sizes.get("max_length", 0)
    if sizes.get("min_length", 0) >= 4:
        return users
    return max(1, -(-(sizes.get("interactions", 0) - 3 * users) // max(longest - 3, 1)))


def dataset_needs(
    cfg: Config, num_items: int, split: Any = None, sizes: dict[str, int] | None = None, max_len: int = 0
) -> list[Need]:
    """Every need of a training run of `cfg`, with the counts `split` gives exactly; without one (a space
    check reads only the manifest's `sizes`), leave-one-out's counts are bounded from below by the
    manifest's (a batch of min(batch_size, rows) rows, one labelled position each), and one row stands for
    every count that cannot be. `max_len`: the model's window (0: unknown)."""
    rows = users = rollouts = 1
    positions = 0
    if split is not None:
        positions = batch_positions(cfg, split, max_len)
        if cfg.eval.sampled_negatives:
            users = len(split.targets("valid")[0])
        if cfg.eval.generate_steps:
            from modsar.data.split import rollout_targets

            rollouts = len(rollout_targets(split.targets("test")[1]))
    elif sizes and cfg.data.split == "loo" and cfg.data.view == "user":  # the manifest counts the user view
        users = rollouts = max(1, sizes.get("evaluable_users", 0))  # one validation and test target each
        rows = loo_training_rows(sizes)
    positions = positions or min(cfg.data.batch_size, rows)  # each row of a batch has a labelled position
    needs = training_needs(cfg, num_items, positions) + evaluation_needs(cfg, users)
    if cfg.eval.generate_steps:
        key = "eval.generate_steps"
        fix = f"set {key}=0 and run modsar generate on the checkpoint with a smaller --batch-size"
        needs += rollout_needs(cfg.eval.generate_steps, rollouts, ROLLOUT_BATCH, num_items, key, key, fix)
    return needs


def total_ram() -> int:
    """This machine's physical memory in bytes."""
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def device_memory(device: str) -> tuple[int, str] | None:
    """(bytes, name) of the memory the device's tensors live in: RAM for the CPU, the GPU's own for CUDA;
    None for a name that is no device or a CUDA device this machine lacks (resolving the device where the run
    starts refuses it, with its own message)."""
    if device == "cpu":
        return total_ram(), "RAM"
    from modsar.devices import resolve

    try:
        resolved = resolve(device)
    except ModsarError:
        return None
    if resolved.type == "cpu":  # auto on a machine without a GPU
        return total_ram(), "RAM"
    import torch

    index = torch.cuda.current_device() if resolved.index is None else resolved.index
    return torch.cuda.get_device_properties(index).total_memory, f"GPU memory (cuda:{index})"


def problem(needs: list[Need], device: str) -> str | None:
    """One line for the first need above what holds it (the setting, the estimate, the limit and the fix),
    or None when all fit."""
    on_device = None if all(need.host for need in needs) else device_memory(device)
    for need in needs:
        limit = (total_ram(), "RAM") if need.host or device == "cpu" else on_device
        if limit is None or need.bytes <= limit[0]:
            continue
        return (
            f"{need.setting} needs at least {size(need.bytes)} for {need.what}, more than this machine's "
            f"{size(limit[0])} of {limit[1]}; {need.fix}"
        )
    return None


def refuse(needs: list[Need], device: str, where: str = "") -> None:
    """`problem` as a ModsarError, prefixed with `where` (the config's source) when given."""
    found = problem(needs, device)
    if found is not None:
        raise ModsarError(f"{where}: {found}" if where else found)
