"""Which recorded rows a command works on: the checkpoints `modsar analyze --experiment` loads, and the rows
`modsar report` covers.

Choosing rows is a fact about the rows (their `selected`, `role`, `status` and arm columns), not about a
command line: it lives beside the rows it reads, so that the CLI and any other caller choose the same rows
and the rules are tested without parsing options."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

from modsar.config import TrainConfig
from modsar.errors import ModsarError

if TYPE_CHECKING:
    import pandas as pd


def best_checkpoints(rows: pd.DataFrame) -> list[tuple[str, str]]:
    """A search's selected AE and AR checkpoints (per backbone, where it compared backbones, and per arm of a
    space with `arms`); for `modsar train` experiments, the best-validation checkpoint per task and backbone.
    Each comes with the arm values that tell it from the others ("positional=target_aligned,
    user_fusion=token"; "" if none)."""
    if not len(rows):
        return []
    if "checkpoint" not in rows:  # `modsar train` rows of runs that diverged before validating have none
        rows = rows.assign(checkpoint=None)
    chosen = rows[rows["selected"].astype(bool)]
    if not len(chosen):
        chosen = _best_trained(rows)
    arm_lists = chosen["space_arms"].dropna() if "space_arms" in chosen else []
    # compared models: one checkpoint each
    arms = sorted({arm for keys in arm_lists for arm in json.loads(keys)})
    key = ["task", "model.backbone", *[a for a in arms if a in chosen]]
    found = []
    for _, row in chosen.drop_duplicates(key).sort_values(key).iterrows():
        path = Path(str(row["checkpoint"]))
        arm = ", ".join(f"{k.split('.')[-1]}={row[k]}" for k in key[2:])
        found.append((str(path / "best.pt" if path.is_dir() else path), arm))
    return found


def _best_trained(rows: pd.DataFrame) -> pd.DataFrame:
    """The finished `modsar train` rows with a checkpoint, best validation score (each by its own monitor)
    first."""
    trained = rows[(rows["role"] == "train") & (rows["status"] == "finished") & rows["checkpoint"].notna()]
    monitor = [
        TrainConfig(monitor=name).monitor_key  # its monitor_key holds the hr@ -> recall@ alias
        for name in trained["train.monitor"]
    ]
    trained = trained.assign(
        score=[row[f"valid.{m}"] for (_, row), m in zip(trained.iterrows(), monitor, strict=True)]
    )
    return trained.sort_values("score", ascending=False)


def experiment_rows(root: str, experiments: list[str] | None = None, option: str = "--experiment"):
    """The rows of the named experiments (None: of every experiment under `root`), read by `read_rows`'s one
    definition of an experiment: the folder `<root>/<name>/`. A name without rows there is a ModsarError
    naming `option` and the experiments the root does hold."""
    import pandas as pd

    from modsar.records.rows import deeper_rows_hint, experiment_folders, read_rows

    if not experiments:
        return read_rows(root)
    frames = []
    for name in dict.fromkeys(experiments):  # each once, in the order given
        rows = read_rows(root, name)
        if not len(rows):
            held = experiment_folders(root)
            raise ModsarError(
                f"{option}: no rows for {name!r} under {root}"
                + (
                    deeper_rows_hint(root, experiment=name)
                    or (f"; it holds {', '.join(held[:8])}{' ...' if len(held) > 8 else ''}" if held else "")
                )
            )
        frames.append(rows)
    return pd.concat(frames, ignore_index=True) if len(frames) > 1 else frames[0]


def report_rows(
    rows: pd.DataFrame, root: str, spaces: list[str] | None = None, datasets: list[str] | None = None
) -> pd.DataFrame:
    """The rows a report covers: those of the named spaces and datasets (None: all), each name required to
    have rows under `root` (else a ModsarError naming the CLI option), and only rows of a design space:
    `modsar train` rows belong to none."""
    for column, wanted in (("space", spaces), ("dataset", datasets)):
        if wanted:
            unknown = sorted(set(wanted) - set(rows[column].dropna()))
            if unknown:
                raise ModsarError(f"--{column}: no rows for {unknown[0]!r} under {root}")
            rows = rows[rows[column].isin(wanted)]
    if len(rows) and "space" in rows:
        rows = rows[rows["space"].notna()]
    return rows
