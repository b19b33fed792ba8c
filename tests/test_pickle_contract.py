"""The import path a search's pickles name (modsar.sweep.pickled): every contract name is handed out there and
pickles as such, and a pickle that names a defining module (a search saved before the contract) still loads.
tests/test_search.py checks that a real search's tuner.pkl, searcher and callback states name no other
modsar module."""

from __future__ import annotations

import importlib
import io
import pickle

import pytest
import ray.cloudpickle as cloudpickle

from modsar.sweep import pickled


def modsar_globals(data: bytes) -> set[str]:
    """'module name' of every modsar class or function a pickle names, as loading it asks for them."""
    named = set()

    class Recording(pickle.Unpickler):
        def find_class(self, module: str, name: str):
            named.add(f"{module} {name}")
            return super().find_class(module, name)

    Recording(io.BytesIO(data)).load()
    return {n for n in named if n.startswith(("modsar", "hf_plugins"))}


@pytest.mark.parametrize("name", sorted(pickled.CONTRACT))
def test_each_contract_name_is_handed_out_here_and_pickles_as_such(name):
    obj = getattr(pickled, name)
    assert obj is getattr(importlib.import_module(pickled.CONTRACT[name]), name)
    assert obj.__module__ == "modsar.sweep.pickled"
    for dump in (pickle.dumps, cloudpickle.dumps):
        data = dump(obj)
        assert modsar_globals(data) == {f"modsar.sweep.pickled {name}"} and pickle.loads(data) is obj


def test_a_pickle_naming_the_defining_module_still_loads():
    from modsar.sweep.plan import SearchRequest

    earlier = b"cmodsar.sweep.plan\nSearchRequest\n."  # protocol 0, as a search saved before the contract
    assert pickle.loads(earlier) is SearchRequest


def test_only_contract_names_can_claim_the_path():
    def helper() -> None:
        """Not in the contract."""

    with pytest.raises(ValueError, match=r"is not in modsar\.sweep\.pickled\.CONTRACT"):
        pickled.pickled(helper)
    with pytest.raises(AttributeError):
        pickled.nosuch  # noqa: B018


def test_a_bound_method_pickles_by_the_contract_path():
    """Optuna's define-by-run function is the space's bound `suggest`: the searcher's state pickles it."""
    from modsar.sweep.spaces import load_space

    suggest = load_space("quickstart").suggest
    for dump in (pickle.dumps, cloudpickle.dumps):
        data = dump(suggest)
        assert {n.split()[0] for n in modsar_globals(data)} == {"modsar.sweep.pickled"}
        assert pickle.loads(data).__func__ is suggest.__func__
