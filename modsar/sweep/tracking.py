"""Opt-in MLflow tracking (`modsar search --mlflow URI`) through Ray Tune's own MLflow logger.

Imported only when asked for, since it needs MLflow (`pip install 'modsar[mlflow]'`). MLflow allows no '@' in
metric names, so `valid.recall@10` is logged as `valid.recall_at_10`.
"""

from __future__ import annotations

import os
from typing import Any

from ray.air.integrations.mlflow import MLflowLoggerCallback

from modsar.sweep.credentials import mlflow_uri
from modsar.sweep.pickled import pickled
from modsar.sweep.plan import Plan


@pickled
class MLflowRuns(MLflowLoggerCallback):
    """One MLflow run per trial: the sampled values as params, every validation report as a metrics step."""

    def setup(self, *args: Any, **kwargs: Any) -> None:
        """The client gets the URI without its credentials (they are in MLflow's variables while the search
        runs: sweep.credentials); the callback keeps the redacted URI, which Tune pickles into tuner.pkl."""
        shown = self.tracking_uri
        self.tracking_uri = mlflow_uri(shown) if shown else shown
        try:
            super().setup(*args, **kwargs)
        finally:
            self.tracking_uri = shown

    def log_trial_result(self, iteration: int, trial: Any, result: dict) -> None:
        """MLflow refuses '@' in metric names: ndcg@10 is logged as ndcg_at_10."""
        super().log_trial_result(iteration, trial, {k.replace("@", "_at_"): v for k, v in result.items()})

    def log_trial_end(self, trial: Any, failed: bool = False) -> None:
        """End the trial's run, if this fit started one: a resumed search's scheduler may stop a trial that
        never ran in it."""
        if trial in self._trial_runs:
            super().log_trial_end(trial, failed)


def mlflow_callback(plan: Plan, role: str) -> MLflowRuns:
    """The MLflow logger of a search's fit: one run per trial in an experiment named after the search, tagged
    with its space, dataset and role."""
    uri = str(plan.request.mlflow)
    if uri.startswith("file:"):  # MLflow 3 keeps the file store only on request; --mlflow file:... is one
        os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
    return MLflowRuns(
        tracking_uri=uri,
        experiment_name=plan.request.experiment_name,
        tags={
            "modsar.space": plan.space.path or plan.request.space,
            "modsar.dataset": plan.request.dataset,
            "modsar.role": role,
        },
    )
