"""Optuna's sampling for a search, without training one configuration twice.

A trial's curve is fixed by its configuration and seed, and every trial of a search has the search's seed,
so a configuration drawn again trains the same curve again: nothing learned, all of it paid. TPE draws
repeats often on the paper's spaces, which are small grids (`local_attn`: 320 AE and 80 AR points): the first
headline search on Beauty trained its best AE configuration three times and another twice, 455 of its 990 AE
epochs. So a repeat is never handed to Tune. Optuna is told the earlier trial's result for it, as if it had
been trained (its curve would be the same), and asked again; a repeat of a trial still running is dropped
(Optuna learns that one's value when it ends). After a few repeats in a row TPE has little else to propose,
so the next draws are uniform over the space (seeded) until one is new. Each direction then trains as many
distinct configurations as it has trials.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import optuna
from optuna.trial import TrialState
from ray.tune.search import ConcurrencyLimiter
from ray.tune.search.optuna import OptunaSearch

from modsar.sweep.pickled import pickled

# a resumed trial restarts at its last checkpoint reported to Tune and reports again the passes after it, with
# the same values (one curve); Optuna keeps the first and warns once per pass: noise on every resume. Set on
# import, which a resumed search's unpickling of its searcher also does.
warnings.filterwarnings(
    "ignore", message="The reported value is ignored because this `step=", category=UserWarning
)
TPE_REPEATS = 8  # repeats in a row before the draws turn uniform
UNIFORM_DRAWS = 1000  # uniform draws after those before a repeat is trained after all (a space used up)


@pickled
class DistinctOptunaSearch(OptunaSearch):
    """Ray's OptunaSearch whose suggestions are configurations no earlier trial of the study had; `seed`
    seeds the uniform draws."""

    def __init__(self, *args: Any, seed: int = 0, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._uniform_seed = seed

    @property
    def _study(self) -> optuna.Study:
        assert self._ot_study is not None, "the study is made with the searcher's space"
        return self._ot_study

    def suggest(self, trial_id: str) -> dict | None:
        """The configuration of Tune's next trial: the first draw no earlier trial had."""
        sampler = self._study.sampler
        try:
            for draw in range(TPE_REPEATS + UNIFORM_DRAWS - 1):
                if draw == TPE_REPEATS:  # seeded by the search's seed and the trials so far: a resumed
                    seed = (self._uniform_seed * 100_003 + len(self._ot_trials)) % 2**32  # draws the same
                    self._study.sampler = optuna.samplers.RandomSampler(seed=seed)
                config = super().suggest(trial_id)
                earlier = self._earlier(self._ot_trials[trial_id])
                if earlier is None:
                    return config
                repeat = self._ot_trials.pop(trial_id)
                if earlier.state == TrialState.COMPLETE:
                    self._study.tell(repeat, earlier.values)
                else:  # still running: its value will come; this draw tells Optuna nothing
                    self._study.tell(repeat, state=TrialState.FAIL)
            return super().suggest(trial_id)  # every draw a repeat: the space is used up, so one is trained
        finally:
            self._study.sampler = sampler

    def on_trial_result(self, trial_id: str, result: dict) -> None:
        """A trial's intermediate value; none after the study was told its value (successive halving tells
        it at the first rung, and the trial may train on)."""
        if trial_id not in self._completed_trials:
            super().on_trial_result(trial_id, result)

    def on_trial_complete(self, trial_id: str, result: dict | None = None, error: bool = False) -> None:
        """The trial's value, told once: a trial promoted past the first rung was told its value there."""
        if trial_id not in self._completed_trials:
            super().on_trial_complete(trial_id, result, error)

    def tell_ended(self, point: dict[str, Any], value: float | None) -> None:
        """Add a trial an earlier run of the direction ended (its sampled `point` and its value; None for
        one that never validated, told the 0.0 Tune's report gave it) to the study, as if it had been drawn
        and told here: TPE learns from it and never draws it again (carry_on)."""
        assert callable(self._space), "a search's space is define-by-run (SearchSpace.suggest)"
        self._study.enqueue_trial(point, skip_if_exists=False)
        trial = self._study.ask()
        self._space(trial)  # registers each param's distribution; the enqueued values are the ones taken
        self._study.tell(trial, 0.0 if value is None else value)

    def queue(self, points: list[dict[str, Any]]) -> None:
        """Have the next draws be these points, in order (a direction going on from its rows under
        successive halving replays its trials: carry_on); Optuna learns each one's value as Tune tells it."""
        for point in points:
            self._study.enqueue_trial(point, skip_if_exists=False)

    def _earlier(self, trial: optuna.trial.Trial) -> Any:
        """The first other trial of the study, complete or running, with `trial`'s configuration; None if
        there is none."""
        params = trial.params
        for other in self._study.get_trials(deepcopy=False):
            alive = other.state in (TrialState.COMPLETE, TrialState.RUNNING)
            if alive and other.number != trial.number and other.params == params:
                return other
        return None


def sampled_search(
    suggest: Callable[[Any], dict], search: str, metric: str, seed: int, concurrent: int
) -> ConcurrencyLimiter:
    """A direction's searcher: TPE ("optuna") or uniform draws ("random") over the define-by-run space
    `suggest`, seeded, without repeats, at most `concurrent` trials at once."""
    sampler = (
        optuna.samplers.RandomSampler(seed=seed)
        if search == "random"
        else optuna.samplers.TPESampler(seed=seed)
    )
    searcher = DistinctOptunaSearch(space=suggest, metric=metric, mode="max", sampler=sampler, seed=seed)
    return ConcurrencyLimiter(searcher, max_concurrent=concurrent)
