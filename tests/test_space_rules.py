"""A space means what it says: one source per key, each grid value once, and grids counted (never built) before
a search, with `modsar spaces --check` printing the trials the search's Tuners get. No Ray is started here."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from modsar import space_check, spaces
from modsar.cli import main
from modsar.errors import ModsarError
from modsar.spaces import MAX_GRID_POINTS, SearchSpace, grid_size_by_task, load_space, parse_space

SPACES = Path(__file__).parent / "spaces"
BUNDLED = Path(__file__).parent.parent / "search_spaces"


def _space_file(tmp_path: Path, body: str) -> str:
    path = tmp_path / "s.yaml"
    path.write_text(body)
    return str(path)


def _refused(capsys, *args: str) -> str:
    """The one error line a refused command prints (exit 2, no traceback)."""
    assert main(list(args)) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    return err[0]


@pytest.mark.parametrize("body,message", [
    ("params:\n  model.dropout: {grid: [0.1, 0.3], also: [model.attn_dropout]}\n"
     "  model.attn_dropout: {grid: [0.0, 0.5]}\n",
     "params.model.dropout: 'also' sets 'model.attn_dropout', which is searched itself (params.model.attn_dropout: "
     "grid [0.0, 0.5]); the 'also' value would replace those values in every trial it is set, so they would never "
     "run; remove 'model.attn_dropout' from 'also' or from params"),
    ("params:\n  task: {grid: [ae, ar]}\n  model.attn_dropout: {grid: [0.0], when: {task: ae}}\n"  # in a branch
     "  model.dropout: {grid: [0.1], also: [model.attn_dropout]}\n",
     "params.model.dropout: 'also' sets 'model.attn_dropout', which is searched itself"),
    ("params:\n  model.dropout: {grid: [0.1], also: [model.attn_dropout]}\n"
     "  mask_prob: {grid: [0.2], also: [model.attn_dropout]}\n",
     "params.mask_prob: 'also' sets 'model.attn_dropout', which the 'also' of params.model.dropout sets too; one "
     "key takes one param's value: keep 'model.attn_dropout' in one 'also'"),
    ("params:\n  model.positional: {grid: [learned], also: [task]}\n",
     "params.model.positional: 'also' cannot set 'task': the AE/AR switch is searched only as the 'task' param"),
    ("params:\n  model.dropout: {grid: [0.1], also: [model.dropout]}\n",
     "params.model.dropout: 'also' names the param's own key 'model.dropout'; remove it from 'also'"),
    ("params:\n  model.dropout: {grid: [0.1], also: [model.attn_dropout, model.attn_dropout]}\n",
     "params.model.dropout: 'also' names 'model.attn_dropout' twice; name each key once"),
    ("params:\n  model.dropout: {grid: [0.8], also: [data.split_valid]}\n",  # type-checks, but varies the split
     "a search cannot vary how the data is viewed or split"),
])
def test_a_key_set_by_two_sources_is_refused(tmp_path, capsys, body, message):
    path = _space_file(tmp_path, body)
    assert message in _refused(capsys, "spaces", path, "--check")
    out = tmp_path / "results"
    assert message in _refused(capsys, "search", "--space", path, "--dataset", "synthetic", "--results", str(out))
    assert not out.exists()


def test_a_yaml_key_given_twice_is_refused(tmp_path, capsys):
    path = _space_file(tmp_path, "params:\n  model.dropout: {grid: [0.1, 0.3]}\n  model.dropout: {grid: [0.0]}\n")
    assert _refused(capsys, "spaces", path, "--check") == (
        f"modsar: error: space file '{path}' gives the key 'model.dropout' twice in one mapping (lines 2 and 3); "
        "YAML would keep only the last: remove one")
    anchored = _space_file(tmp_path, "base: &b {model.dropout: 0.1}\nparams:\n  model.num_heads: {grid: [1]}\n"
                                     "other: {<<: *b, model.dropout: 0.2}\n")  # a merge's key may be overridden
    assert "unknown top-level key 'other'" in _refused(capsys, "spaces", anchored, "--check")


@pytest.mark.parametrize("param,message", [
    ("task: {grid: [ar, ar]}", "params.task: grid value 'ar' is listed twice; list each value once (a repeated "
     "value would run the same trials again)"),
    ("model.num_heads: {grid: [1, 1, 2]}", "params.model.num_heads: grid value 1 is listed twice"),
    ("model.dropout: {grid: [0, 0.1, 0.0]}", "grid value 0 is listed twice (as 0 and 0.0: one value of this key)"),
    ("train.lr: {grid: [0.001, 1e-3]}",  # YAML 1.1 reads 1e-3 (no dot) as a string; a float key reads it as 0.001
     "grid value 0.001 is listed twice (as 0.001 and '1e-3': one value of this key)"),
    ("model.num_heads: {choice: [1, 2, 2]}", "choice value 2 is listed twice; list each value once (a repeated "
     "value would be sampled twice as often)"),
    ("model.embedding_norm: {grid: [true, 'true']}", "'model.embedding_norm' must be bool, got 'true'"),
])
def test_a_value_listed_twice_is_refused_with_its_key_and_file(tmp_path, capsys, param, message):
    path = _space_file(tmp_path, f"params:\n  {param}\n")
    assert _refused(capsys, "spaces", path, "--check").startswith(f"modsar: error: space '{path}': params.")
    assert message in _refused(capsys, "spaces", path, "--check")


CONDITIONAL = """
params:
  task: {grid: [ae, ar]}
  model.backbone: {grid: [modular, llama], when: {task: ar}}
  model.num_heads: {grid: [1, 2, 4]}
  model.local_heads: {grid: [0, 1], when: {model.backbone: modular, model.num_heads: [2, 4]}}
  model.local_window: {grid: [1, 2, 3], when: {model.local_heads: 1}}
  mask_prob: {grid: [0.2, 0.4], when: {task: ae}}
  model.dropout: {grid: [0.0, 0.2], also: [model.attn_dropout]}
"""


def test_count_is_the_number_of_points_built(tmp_path):
    """Nested conditions (a condition on a conditional param, one param read by two): counted = built."""
    space = parse_space(yaml.safe_load(CONDITIONAL), "c", "c.yaml")
    ae = 3 * 2 * 2  # heads x masks x dropouts: the backbone is AR-only, so AE never meets local_heads' condition
    ar = (1 + 2 * (1 + 3) + 3) * 2  # modular: 1 head, or 2/4 heads x (no local head, or one with 3 windows); llama
    assert grid_size_by_task(space) == {"ae": ae, "ar": ar} == {"ae": 12, "ar": 24}
    assert space.count_points(space.grid_values, 100) == (36, True)
    assert space.count_points(space.grid_values, 3)[1] is False  # more partial points kept apart than 3: stops
    for task in ("ae", "ar"):
        points = space.for_task(task).grid_points()
        assert len(points) == grid_size_by_task(space)[task]
        assert len({repr(p) for p in points}) == len(points)


@pytest.mark.parametrize("path", [*sorted(BUNDLED.glob("*.yaml")),
                                  *(p for p in sorted(SPACES.glob("*.yaml")) if p.stem != "continuous")])
def test_every_grid_space_counts_what_its_tuners_get(path):
    space = load_space(str(path))
    counts = grid_size_by_task(space)
    assert list(counts) == space.tasks()
    assert counts == {task: len(space.for_task(task).grid_points()) for task in space.tasks()}


def test_check_prints_the_trials_the_search_builds(tmp_path, capsys):
    path = _space_file(tmp_path, CONDITIONAL.replace("model.backbone: {grid: [modular, llama]",
                                                     "model.backbone: {grid: [modular]"))
    space = load_space(path)
    built = {task: len(space.for_task(task).grid_points()) * 3 for task in space.tasks()}  # as tuner.build_tuner
    assert main(["spaces", path, "--check", "--num-samples", "3"]) == 0
    assert capsys.readouterr().out.startswith(f"space 's' (grid search: AE {built['ae']}, AR {built['ar']} trials)")
    assert built == {"ae": 36, "ar": 54}


HUGE = "params:\n" + "".join(f"  {key}: {{grid: [{', '.join(str(v / 100) for v in range(1, 11))}]}}\n" for key in (
    "model.dropout", "model.attn_dropout", "train.lr", "train.weight_decay", "mask_prob", "model.item_sse_prob",
    "train.grad_clip")) + "  eval.sample_seed: {grid: [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]}\n"  # 10^8 points


@pytest.fixture
def no_points_built(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("a point was built")

    monkeypatch.setattr(SearchSpace, "points", refuse)


def test_a_grid_above_the_limit_is_refused_before_any_point_is_built(tmp_path, capsys, no_points_built):
    path = _space_file(tmp_path, HUGE)
    message = (f"modsar: error: space '{path}': its grid has 100,000,000 points, above the 100,000 a grid search "
               "builds (modsar.spaces.MAX_GRID_POINTS); search it with --search random or --search optuna and "
               "--num-samples N, or shrink the grid")
    assert _refused(capsys, "spaces", path) == message
    assert _refused(capsys, "spaces", path, "--check") == message
    out = tmp_path / "results"
    assert _refused(capsys, "search", "--space", path, "--dataset", "synthetic", "--results", str(out)) == message
    assert not out.exists()


def test_a_limit_kept_apart_by_conditions_is_refused_unbuilt(no_points_built):
    """Six params a later condition reads keep 10^6 partial points apart: counting stops past the limit."""
    keys = ("model.dropout", "model.attn_dropout", "train.lr", "train.weight_decay", "model.item_sse_prob",
            "train.grad_clip")
    params = {k: {"grid": [v / 100 for v in range(1, 11)]} for k in keys}
    params["mask_prob"] = {"grid": [0.2], "when": {k: 0.01 for k in keys}}
    space = parse_space({"params": params}, "k", "k.yaml")
    with pytest.raises(ModsarError, match="its grid has more than 100,000 points, above the 100,000"):
        grid_size_by_task(space)


def test_the_limit_is_inclusive(monkeypatch):
    monkeypatch.setattr(spaces, "MAX_GRID_POINTS", 12)
    at = parse_space({"params": {"task": {"grid": ["ae", "ar"]}, "model.num_heads": {"grid": [1, 2, 4]},
                                 "mask_prob": {"grid": [0.1, 0.2, 0.3], "when": {"task": "ae"}}}}, "a", "a.yaml")
    assert grid_size_by_task(at) == {"ae": 9, "ar": 3} and len(at.grid_points()) == 12
    above = parse_space({"params": {"seed": {"grid": list(range(13))}}}, "b", "b.yaml")
    with pytest.raises(ModsarError, match="its grid has 13 points, above the 12 a grid search builds"):
        above.grid_points()


def test_a_large_space_is_sampled_by_random_search_and_described(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(space_check, "CHECK_SAMPLE", 40)
    path = _space_file(tmp_path, HUGE + "budget: {search: random, num_samples: 8}\n")
    assert main(["spaces", path, "--check"]) == 0
    assert capsys.readouterr().out.strip() == ("space 's' (random search: AR 8 trials): all 40 configurations (a "
                                               "seeded sample: the space has more than 100,000 combinations) are "
                                               "valid")
    assert main(["spaces", path]) == 0
    assert (f"trials (full grid): more than the grid search limit of {MAX_GRID_POINTS} (random/optuna only)"
            in capsys.readouterr().out)


def test_the_bundled_listing_counts_without_building(capsys, no_points_built):
    assert main(["spaces"]) == 0
    lines = {line.split()[0]: line for line in capsys.readouterr().out.splitlines()}
    assert lines.keys() == {p.stem for p in BUNDLED.glob("*.yaml")}
    assert lines["quickstart"].startswith("quickstart     AE 8, AR 4 ")
    assert lines["residual_models"].startswith("residual_models AE 1, AR 4 ")


def test_an_override_of_a_searched_key_is_refused(capsys):
    assert _refused(capsys, "spaces", "quickstart", "--check", "model.dropout=0.5") == (
        "modsar: error: override 'model.dropout=0.5' sets a key the space searches (params.model.dropout), whose "
        "values would replace it in every trial; drop the override, or copy the space file and change its params")
    assert "(the 'also' of params.model.dropout)" in _refused(capsys, "spaces", "quickstart", "--check",
                                                              "model.attn_dropout=0.0")


def test_a_task_override_counts_the_direction_that_runs(tmp_path, capsys):
    path = _space_file(tmp_path, "params:\n  model.num_heads: {grid: [1, 2]}\n")
    assert main(["spaces", path, "--check", "task=ae"]) == 0
    assert capsys.readouterr().out.startswith("space 's' (grid search: AE 2 trials)")
