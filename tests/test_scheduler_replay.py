"""The replay of an asynchronous ASHA search (modsar.sweep.scheduler_replay) against hand-counted cases: Ray's
own scheduler decides, the first trial at a rung always goes on, workers run in parallel, the last pass is cut
at max_epochs, and numpy's global generator is left as it was."""

from __future__ import annotations

import dataclasses

import numpy as np

from modsar.sweep.scheduler_replay import Schedule, TrialShape, _one_run, replay

PASS_S = 10.0
SHAPE = TrialShape(share=1.0, steps_per_epoch=7, pass_s=PASS_S, last_pass_s=PASS_S)
# rungs at passes 1 and 2, max_t 4 passes; 5 epochs a pass
PASSES = Schedule(grace=1, reduction_factor=2, max_t=4, unit="passes", eval_every=5, max_epochs=200)


def run(qualities, parallel, **changes):
    schedule = dataclasses.replace(PASSES, **changes)
    return _one_run([SHAPE] * len(qualities), np.array(qualities), parallel, schedule)


def test_each_better_trial_goes_on_to_max_t():
    epochs, passes, seconds, busy = run([0.1, 0.2, 0.3, 0.4], parallel=1)
    assert (epochs, passes, seconds, busy) == (80, 16, 16 * PASS_S, 1.0)


def test_a_worse_trial_stops_at_the_first_rung_where_it_is_below_the_cutoff():
    # the first trial has nothing to be compared with: 4 passes; each later one is below the median: 1 pass
    epochs, passes, seconds, _ = run([0.4, 0.3, 0.2, 0.1], parallel=1)
    assert (epochs, passes, seconds) == (35, 7, 7 * PASS_S)


def test_two_workers_share_the_trials_and_idle_at_the_end():
    # trials 0 and 1 start together; 1 stops at rung 1 (below 0.4), 2 and 3 follow it on that worker and stop
    # at rung 1 too, while 0 runs its 4 passes: 4 passes of wall-clock, 7 of 8 worker-passes busy
    epochs, passes, seconds, busy = run([0.4, 0.3, 0.2, 0.1], parallel=2)
    assert (epochs, passes, seconds, busy) == (35, 7, 4 * PASS_S, 7 / 8)


def test_steps_unit_and_the_last_pass_cut_at_max_epochs():
    # 7 steps an epoch, a pass every 5 epochs (35 steps): the 40-step rung is seen at pass 2 (70 steps); max_t
    # none; max_epochs 12 ends a trial at pass 3 after 2 epochs of it
    shape = TrialShape(1.0, 7, pass_s=PASS_S, last_pass_s=4.0)
    steps = Schedule(grace=40, reduction_factor=2, max_t=2**62, unit="steps", eval_every=5, max_epochs=12)
    epochs, passes, seconds, _ = _one_run([shape] * 2, np.array([0.9, 0.1]), 1, steps)
    assert (epochs, passes) == (12 + 10, 3 + 2)  # the second trial stops at its 70-step pass
    assert seconds == 2 * PASS_S + 4.0 + 2 * PASS_S


def test_replay_is_seeded_and_leaves_numpy_global_state():
    np.random.seed(5)
    before = np.random.get_state()[1].copy()
    a = replay([SHAPE], 12, 2, PASSES, seed=1)
    b = replay([SHAPE], 12, 2, PASSES, seed=1)
    assert a == b
    assert (np.random.get_state()[1] == before).all()
    # between the synchronous count (12 to rung 1, 6 to rung 2, 3 to max_t: 27 passes) and all to max_t
    assert 27 * 5 <= a.epochs <= 12 * 4 * 5
    assert a.seconds >= a.passes * PASS_S / 2 and 0.5 < a.busy <= 1  # the work spread on 2 workers, or more


def test_each_replay_keeps_its_wall_clock_and_the_order_of_trials_spreads_them():
    """4 trials on 1 worker: in the best order (each better than the last) all go to max_t, 16 passes; in the
    worst (each worse) 7 passes. Replays in random orders fall between, and their mean is the estimate's."""
    a = replay([SHAPE], 4, 1, PASSES, runs=40, seed=3)
    assert len(a.seconds_by_run) == 40 and a.seconds == sum(a.seconds_by_run) / 40
    assert set(a.seconds_by_run) <= {k * PASS_S for k in range(7, 17)}
    assert min(a.seconds_by_run) < max(a.seconds_by_run)
