"""The task: what a model is trained to predict, and so which way its attention looks.

AE (BERT4Rec-style): bidirectional attention over the whole window, trained to recover masked items, and at
inference scores a [MASK] appended after the history. AR (SASRec-style): causal attention, trained on every
next item, and scores the next item from the last position. Everything that differs between the two is
decided by this value: it is a `str` (stored configs, rows and search spaces write "ae" / "ar"), so a row,
a YAML file and a Tune config need no conversion, but code branches on its members, never on bare strings."""

from __future__ import annotations

import enum

import yaml


class Task(str, enum.Enum):
    AE = "ae"
    AR = "ar"

    def __str__(self) -> str:  # "ae", in f-strings and messages, on every Python version
        return self.value

    @property
    def causal(self) -> bool:
        """Whether position t may attend only to positions <= t (AR), or to the whole window (AE)."""
        return self is Task.AR

    @property
    def masked(self) -> bool:
        """Whether inputs carry [MASK] tokens: AE's training targets and its inference slot."""
        return self is Task.AE

    @property
    def label(self) -> str:
        """How tables and reports name it: AE, AR."""
        return self.value.upper()


# A config (dataclasses.asdict of it, a plugin's own dump) stays YAML-writable with a Task in it: as "ae"/"ar"
yaml.SafeDumper.add_representer(Task, lambda dumper, task: dumper.represent_str(task.value))
yaml.Dumper.add_representer(Task, lambda dumper, task: dumper.represent_str(task.value))
