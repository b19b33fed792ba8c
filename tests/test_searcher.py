"""Optuna sampling without repeats (modsar.sweep.searcher): a configuration is handed to Tune once; Optuna
is told an earlier trial's value for a repeat, a repeat of a running trial is dropped, and a used-up space
falls back to training a repeat. The searcher is driven as Tune drives it (suggest, on_trial_complete)."""

from __future__ import annotations

import optuna
import pytest
from optuna.trial import TrialState

from modsar.sweep import searcher as searcher_module
from modsar.sweep.searcher import DistinctOptunaSearch

METRIC = "best.ndcg@10"


class SmallSpace:
    """A define-by-run space of hidden sizes (a class: the searcher's state, pickled, holds it)."""

    def __init__(self, sizes) -> None:
        self.sizes = list(sizes)

    def __call__(self, trial) -> dict:
        return {"model.hidden_size": trial.suggest_categorical("model.hidden_size", self.sizes)}


def make(seed: int = 0, sizes=(16, 32, 64)) -> DistinctOptunaSearch:
    sampler = optuna.samplers.TPESampler(seed=seed, n_startup_trials=1)
    return DistinctOptunaSearch(
        space=SmallSpace(sizes), metric=METRIC, mode="max", sampler=sampler, seed=seed
    )


def size(config: dict) -> int:
    return config["model.hidden_size"]


def run(search: DistinctOptunaSearch, trials: int, start: int = 0) -> list[int]:
    """Suggest and complete `trials` trials (ids t<start>...) one after the other, the larger the better;
    their hidden sizes."""
    sizes = []
    for k in range(start, start + trials):
        config = search.suggest(f"t{k}")
        sizes.append(size(config))
        search.on_trial_complete(f"t{k}", {METRIC: size(config) / 100})
    return sizes


def test_each_trial_gets_a_configuration_no_earlier_trial_had():
    search = make()
    assert sorted(run(search, 3)) == [16, 32, 64]
    trained = {t.number for t in search._ot_trials.values()}
    repeats = [t for t in search._ot_study.trials if t.number not in trained]
    assert repeats  # TPE, having seen the larger do better, proposed one again
    for repeat in repeats:  # told the value the first trial of its configuration got, never handed to Tune
        first = next(t for t in search._ot_study.trials if t.params == repeat.params)
        assert repeat.state == TrialState.COMPLETE and first.number in trained
        assert repeat.values == first.values and first.number < repeat.number


def test_a_used_up_space_trains_a_repeat_after_all(monkeypatch):
    monkeypatch.setattr(searcher_module, "UNIFORM_DRAWS", 20)
    search = make(sizes=(16, 32))
    assert sorted(run(search, 2)) == [16, 32]
    fourth = search.suggest("t2")  # both points taken: the last draw is handed on
    assert size(fourth) in (16, 32)
    last = max(search._ot_trials[f"t{k}"].number for k in range(2))
    repeats = [t for t in search._ot_study.trials if t.number > last]
    assert len(repeats) == searcher_module.TPE_REPEATS + 20  # every draw tried, the last one kept
    assert sum(t.state == TrialState.RUNNING for t in repeats) == 1


def test_a_repeat_of_a_running_trial_is_dropped(monkeypatch):
    search = make(sizes=(16, 32))
    first = size(search.suggest("t0"))  # still running
    assert {first, size(search.suggest("t1"))} == {16, 32}
    # one point, taken by a running trial: every draw is dropped (Optuna told nothing of it) but the last
    monkeypatch.setattr(searcher_module, "UNIFORM_DRAWS", 5)
    search = make(sizes=(16,))
    search.suggest("t0")
    assert size(search.suggest("t1")) == 16
    states = [t.state for t in search._ot_study.trials]
    assert states == [TrialState.RUNNING] + [TrialState.FAIL] * (searcher_module.TPE_REPEATS + 4) + [
        TrialState.RUNNING
    ]


@pytest.mark.parametrize("seed", [0, 1])
def test_the_same_seed_draws_the_same_configurations(seed):
    space = (8, 16, 24, 32, 48, 64, 96, 128)
    a, b = (run(make(seed, space), 6) for _ in range(2))
    assert a == b and len(set(a)) == 6


def test_a_restored_searcher_goes_on_as_the_saved_one_would(tmp_path):
    space = (8, 16, 24, 32, 48, 64, 96, 128)
    search = make(0, space)
    run(search, 3)
    search.save(str(tmp_path / "searcher.pkl"))
    restored = make(0, space)
    restored.restore(str(tmp_path / "searcher.pkl"))
    ahead = [size(search.suggest("t3")), size(restored.suggest("t3"))]
    assert ahead[0] == ahead[1]
    assert len({*run(search, 3, start=4), ahead[0]}) == 4


def test_the_largest_seed_draws_uniformly_too(monkeypatch):
    """The uniform draws' seed stays in numpy's range for every search seed (up to 2**32 - 1)."""
    monkeypatch.setattr(searcher_module, "UNIFORM_DRAWS", 3)
    search = make(seed=2**32 - 1, sizes=(16,))
    assert run(search, 1) == [16]
    assert size(search.suggest("t1")) == 16  # 8 TPE draws, then uniform ones: all repeats, the last trained
