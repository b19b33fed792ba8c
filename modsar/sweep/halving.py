"""Synchronous successive halving: the default scheduler of a sampled search, a Tune TrialScheduler.

Every trial trains to the first rung and waits there (Tune pauses it; its per-pass state resumes it
exactly). When every trial of the direction has reached the rung (or ended before it), the best
max(1, n // reduction_factor) of the n go on to the next rung and the others stop; and so on to max_t.

Why not Ray's ASHA, which decides each trial the moment it reaches a rung against the trials that reached it
before: a sampler that learns (TPE) sends better trials later, each beats the cutoff its predecessors set,
and most run to max_t. Measured on Beauty, 10 of 19 AE trials did, 1.5x the epochs the replay of random
order predicted; in the worst case (every trial better than the last) ASHA saves nothing. Here a search's
epochs are fixed by its trial count: n trials to the first rung, n // rf on to the second, n // rf**2 on to
max_t, whatever order they come in, so its cost can be stated before it starts.

The sampler still learns: when a trial reaches the first rung the searcher is told it is complete with its
value there, so TPE compares trials trained equally long and its concurrency slot frees for the next draw.

A resumed search: the rungs' records are plain dicts keyed by trial id, which SchedulerState saves and
restores with Tune's state. Tune restores a waiting (paused) trial as pending and starts it; the trial, whose
checkpoint was taken at its rung report, repeats that report first (modsar.sweep.trial), so it waits again
here without training a further pass, and its row gets its facts. Rungs count optimizer steps or validation
passes as the trainer reports them, never Tune's own iteration count, which a repeated report would shift.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from ray.tune.experiment import Trial
from ray.tune.schedulers import FIFOScheduler, TrialScheduler

from modsar.sweep.pickled import pickled

if TYPE_CHECKING:
    from ray.tune.execution.tune_controller import TuneController

    from modsar.sweep.plan import Plan


def halving_time(plan: Plan) -> str:
    """What the rungs of a plan's successive halving count, as the trainer reports it (not Tune's iteration
    count, which a resumed trial's repeated report shifts): optimizer steps, or validation passes."""
    return "steps" if plan.unit == "steps" else "passes"


def halving_rungs(plan: Plan) -> tuple[int, ...]:
    """The rungs a plan's trials wait at: none unless it runs successive halving."""
    if plan.scheduler != "halving":
        return ()
    return tuple(rung_times(plan.grace_period, plan.reduction_factor, plan.max_t))


def rung_times(grace: int, reduction_factor: int, max_t: int) -> list[int]:
    """The times (in the scheduler's unit) at which trials wait for a decision: grace * rf**k below max_t."""
    times, t = [], grace
    while t < max_t:
        times.append(t)
        t *= reduction_factor
    return times


def promoted_count(arrived: int, reduction_factor: int) -> int:
    """How many of the `arrived` trials at a rung go on: 1 / rf of them, and at least one, so a search always
    trains a trial to its end."""
    return max(1, arrived // reduction_factor) if arrived else 0


def best_of(
    values: dict[str, float], count: int, mode: str = "max", order: dict[str, int] | None = None
) -> list[str]:
    """The `count` best trial ids by value; ties go to the trial made first (`order`: its index in the
    search), else to the smaller id, so that every run of a search decides alike."""
    sign = -1.0 if mode == "max" else 1.0
    order = order or {}
    ranked = sorted(values, key=lambda t: (_nan_last(sign * values[t]), order.get(t, 0), t))
    return ranked[:count]


def _nan_last(x: float) -> float:
    """A NaN value (a trial that never validated) ranks after every number."""
    return math.inf if math.isnan(x) else x


def trial_index(trial: Trial) -> int:
    """The trial's place in its search (the number its experiment tag starts with; trial ids are random)."""
    head = str(getattr(trial, "experiment_tag", "")).split("_", 1)[0]
    return int(head) if head.isdigit() else 0


def _stop_for_good(tune_controller: TuneController, trial: Trial) -> None:
    """Stop a trial that waits at a rung (or was restored waiting), and have Tune's next save of its state
    say so. Tune saves a trial's status only once it marks the trial for it, which stopping a trial without a
    running actor does not do: the saved state would list it as paused, and a resumed search would start it.
    The mark is Tune's own (a private method, reached past the wrapper Tune hands schedulers); without it,
    `_stopped_at_rung` still stops such a trial again on resume."""
    tune_controller.stop_trial(trial)
    controller = getattr(tune_controller, "_tune_controller", tune_controller)
    mark = getattr(controller, "_mark_trial_to_checkpoint", None)
    if callable(mark):
        mark(trial)


@pickled
class SuccessiveHalving(FIFOScheduler):
    """Synchronous successive halving over the trials of one Tuner (see the module docstring)."""

    def __init__(
        self,
        time_attr: str,
        grace_period: int,
        reduction_factor: int,
        max_t: int,
        metric: str | None = None,
        mode: str | None = None,
        max_running: int | None = None,
    ) -> None:
        super().__init__()
        self._time_attr = time_attr
        self._rf = reduction_factor
        self._max_t = max_t
        self._rungs = rung_times(grace_period, reduction_factor, max_t)
        self._metric, self._mode = metric, mode
        self.max_running = max_running  # trials at once (--max-concurrent): promoted ones resume within it
        self.level: dict[str, int] = {}  # trial id -> the rung it trains towards (its promotions so far)
        self.arrived: list[dict[str, float]] = [{} for _ in self._rungs]  # rung -> trial id -> value there
        self.ended: set[str] = set()  # trials whose report at a rung was their last (patience, divergence)
        self.index: dict[str, int] = {}  # trial id -> its place in the search, for ties
        self.promoted: list[list[str]] = [[] for _ in self._rungs]  # rung -> the trials that went on from it
        self.decided: list[bool] = [False] * len(self._rungs)

    def __setstate__(self, state: dict) -> None:
        """A scheduler pickled by an earlier ModSAR lacks the records added since: they start empty."""
        rungs = len(state.get("_rungs", []))
        later: dict[str, object] = {"max_running": None, "ended": set(), "index": {}}
        later["promoted"] = [[] for _ in range(rungs)]
        self.__dict__.update({**later, **state})

    def set_search_properties(self, metric: str | None, mode: str | None, **spec) -> bool:
        """Take the Tuner's metric and mode where the constructor named none (as Ray's schedulers do)."""
        self._metric = self._metric or metric
        self._mode = self._mode or mode
        return True

    @property
    def rungs(self) -> list[int]:
        """The times at which trials wait for a decision."""
        return list(self._rungs)

    def on_trial_result(self, tune_controller: TuneController, trial: Trial, result: dict) -> str:
        """Continue below the trial's next rung; at it, record its value, tell the searcher (at the first
        rung), and wait for the rung's decision, which this result may complete."""
        t = result.get(self._time_attr)
        if t is None or self._metric not in result:
            return TrialScheduler.CONTINUE
        if t >= self._max_t:
            return TrialScheduler.STOP
        k = self.level.get(trial.trial_id, 0)
        if k >= len(self._rungs) or t < self._rungs[k]:
            return TrialScheduler.CONTINUE
        last = bool(result.get("trial_done") or result.get("done"))  # it ends by itself after this report
        if self.decided[
            k
        ]:  # decided without it (it was retried, or resumed after an error): not among the best
            return TrialScheduler.STOP
        if trial.trial_id not in self.arrived[k]:  # (a resumed trial repeats its report at the rung)
            self.arrived[k][trial.trial_id] = float(result[self._metric])
            self.index[trial.trial_id] = trial_index(trial)
            if k == 0:  # TPE learns from every trial at the same budget; the searcher's slot frees
                tune_controller.search_alg.on_trial_complete(trial.trial_id, result=result)
        if last:
            self.ended.add(trial.trial_id)
        decision = self._decide(tune_controller, k, current=trial)
        return decision or (TrialScheduler.CONTINUE if last else TrialScheduler.PAUSE)

    def on_trial_complete(self, tune_controller: TuneController, trial: Trial, result: dict) -> None:
        """A trial that ended by itself (patience, its last epoch) may complete a rung."""
        self._decide_all(tune_controller)

    def on_trial_remove(self, tune_controller: TuneController, trial: Trial) -> None:
        """A stopped trial no longer holds up a rung."""
        self._decide_all(tune_controller)

    # on_trial_error decides nothing: Tune calls it before it retries the trial (--max-failures), and a
    # trial that failed for good is decided without by choose_trial_to_run, which Tune calls every step

    def _decide_all(self, tune_controller: TuneController) -> None:
        """Every rung whose decision waited only for a trial that has now ended."""
        for k in range(len(self._rungs)):
            self._decide(tune_controller, k)

    def choose_trial_to_run(self, tune_controller: TuneController) -> Trial | None:
        """New trials first, then the promoted ones (within max_running trials at once); never one waiting
        at a rung (a resumed search restores its waiting trials as PENDING), and none a rung stopped."""
        self._decide_all(tune_controller)
        for trial in tune_controller.get_trials():
            if trial.status in (Trial.PENDING, Trial.PAUSED) and self._stopped_at_rung(trial.trial_id):
                _stop_for_good(tune_controller, trial)  # before Tune starts every pending trial itself
        trials = tune_controller.get_trials()
        runnable = [t for t in trials if t.status in (Trial.PENDING, Trial.PAUSED)]
        for trial in runnable:
            if trial.status == Trial.PENDING and not self._waiting(trial.trial_id):
                return trial
        running = sum(t.status in (Trial.RUNNING, Trial.PENDING) for t in trials)
        if self.max_running is not None and running >= self.max_running:
            return None
        return next((t for t in runnable if not self._waiting(t.trial_id)), None)

    def _stopped_at_rung(self, trial_id: str) -> bool:
        """Whether a rung the trial reached was decided without promoting it. Such a trial was stopped while
        it waited; where Tune's saved state still lists it as paused (saved before `_stop_for_good` marked
        such stops, or without Tune's mark), Tune restores it as pending and would train it again (from
        scratch, once a finished direction dropped its resume state)."""
        k = self.level.get(trial_id, 0)
        return k < len(self._rungs) and self.decided[k] and trial_id in self.arrived[k]

    def _waiting(self, trial_id: str) -> bool:
        """Whether the trial has reached its next rung and waits for that rung's decision."""
        k = self.level.get(trial_id, 0)
        return k < len(self._rungs) and trial_id in self.arrived[k]

    def _decide(self, tune_controller: TuneController, k: int, current: Trial | None = None) -> str | None:
        """Rung k's decision, once every trial that can reach it has: the best of the trials there that can
        train on go on (1/rf of all that reached it, at least one), the others stop. Returns the decision for
        `current` (the trial whose result is being processed), if it was made."""
        if self.decided[k] or not self._complete(tune_controller, k):
            return None
        self.decided[k] = True
        trials = tune_controller.get_trials()
        over = {t.trial_id for t in trials if t.status in (Trial.TERMINATED, Trial.ERROR)} | self.ended
        arrived = self.arrived[k]
        candidates = {t: v for t, v in arrived.items() if t not in over}
        count = promoted_count(len(arrived), self._rf)
        self.promoted[k] = best_of(candidates, count, self._mode or "max", self.index)
        for trial_id in self.promoted[k]:
            self.level[trial_id] = k + 1
        action = None
        for trial in trials:
            if trial.trial_id not in candidates:
                continue
            if trial.trial_id in self.promoted[k]:
                action = TrialScheduler.CONTINUE if trial is current else action
            elif trial is current:
                action = TrialScheduler.STOP
            else:
                _stop_for_good(tune_controller, trial)
        return action

    def _complete(self, tune_controller: TuneController, k: int) -> bool:
        """Whether every trial that can reach rung k has: all the direction's trials made (for the first
        rung) and every live one that trains towards rung k there."""
        if not self._rungs or (k == 0 and not tune_controller.search_alg.is_finished()):
            return False
        if k > 0 and not self.decided[k - 1]:
            return False
        for trial in tune_controller.get_trials():
            if trial.status in (Trial.TERMINATED, Trial.ERROR):
                continue
            if self.level.get(trial.trial_id, 0) == k and trial.trial_id not in self.arrived[k]:
                return False
        return bool(self.arrived[k])

    def debug_string(self) -> str:
        """Tune's status line: the rungs, how many trials reached each, which are decided."""
        waiting = [len(a) for a in self.arrived]
        return f"Successive halving: rungs {self._rungs}, trials at each {waiting}, decided {self.decided}."
