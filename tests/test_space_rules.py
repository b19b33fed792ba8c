"""A space means what it says: one source per key, each grid value once, and grids counted (never built)
before a search, with `modsar spaces --check` printing the trials the search's Tuners get. No Ray is started
here."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from modsar.cli import main
from modsar.errors import ModsarError
from modsar.sweep import space_check, spaces
from modsar.sweep.spaces import MAX_GRID_POINTS, SearchSpace, grid_size_by_task, load_space, parse_space

SPACES = Path(__file__).parent / "spaces"
BUNDLED = Path(__file__).parent.parent / "search_spaces"


@pytest.mark.parametrize("args", [["spaces"], ["spaces", "quickstart"]])
def test_listing_or_describing_spaces_starts_neither_torch_nor_ray(args):
    """`modsar spaces` answers in a fraction of a second: the package modsar.sweep imports its modules (and
    with them Ray Tune and torch) only when a search, a check or an estimate needs them."""
    probe = (
        "import sys; from modsar.cli import main; code = main(sys.argv[1:]); "
        "print(code, sorted(m for m in ('torch', 'ray') if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", probe, *args], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.splitlines()[-1] == "0 []" and "quickstart" in done.stdout


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


@pytest.mark.parametrize(
    "body,message",
    [
        (
            "params:\n  model.dropout: {grid: [0.1, 0.3], also: [model.attn_dropout]}\n"
            "  model.attn_dropout: {grid: [0.0, 0.5]}\n",
            "params.model.dropout: 'also' sets 'model.attn_dropout', which is searched itself "
            "(params.model.attn_dropout: "
            "grid [0.0, 0.5]); the 'also' value would replace those values in every trial it is set, so they "
            "would never run; remove 'model.attn_dropout' from 'also' or from params",
        ),
        (
            # in a branch
            "params:\n  task: {grid: [ae, ar]}\n  model.attn_dropout: {grid: [0.0], when: {task: ae}}\n"
            "  model.dropout: {grid: [0.1], also: [model.attn_dropout]}\n",
            "params.model.dropout: 'also' sets 'model.attn_dropout', which is searched itself",
        ),
        (
            "params:\n  model.dropout: {grid: [0.1], also: [model.attn_dropout]}\n"
            "  mask_prob: {grid: [0.2], also: [model.attn_dropout]}\n",
            "params.mask_prob: 'also' sets 'model.attn_dropout', which the 'also' of params.model.dropout "
            "sets too; one key takes one param's value: keep 'model.attn_dropout' in one 'also'",
        ),
        (
            "params:\n  model.positional: {grid: [learned], also: [task]}\n",
            "params.model.positional: 'also' cannot set 'task': the AE/AR switch is searched only as the "
            "'task' param",
        ),
        (
            "params:\n  model.dropout: {grid: [0.1], also: [model.dropout]}\n",
            "params.model.dropout: 'also' names the param's own key 'model.dropout'; remove it from 'also'",
        ),
        (
            "params:\n  model.dropout: {grid: [0.1], also: [model.attn_dropout, model.attn_dropout]}\n",
            "params.model.dropout: 'also' names 'model.attn_dropout' twice; name each key once",
        ),
        (
            # type-checks, but varies the split
            "params:\n  model.dropout: {grid: [0.8], also: [data.split_valid]}\n",
            "a search cannot vary how the data is viewed or split",
        ),
    ],
)
def test_a_key_set_by_two_sources_is_refused(tmp_path, capsys, body, message):
    path = _space_file(tmp_path, body)
    assert message in _refused(capsys, "spaces", path, "--check")
    out = tmp_path / "results"
    assert message in _refused(
        capsys, "search", "--space", path, "--dataset", "synthetic", "--results", str(out)
    )
    assert not out.exists()


def test_a_yaml_key_given_twice_is_refused(tmp_path, capsys):
    path = _space_file(
        tmp_path, "params:\n  model.dropout: {grid: [0.1, 0.3]}\n  model.dropout: {grid: [0.0]}\n"
    )
    assert _refused(capsys, "spaces", path, "--check") == (
        f"modsar: error: space file '{path}' gives the key 'model.dropout' twice in one mapping (lines 2 and "
        "3); YAML would keep only the last: remove one"
    )
    anchored = _space_file(
        tmp_path,
        "base: &b {model.dropout: 0.1}\nparams:\n  model.num_heads: {grid: [1]}\n"
        "other: {<<: *b, model.dropout: 0.2}\n",
    )  # a merge's key may be overridden
    assert "unknown top-level key 'other'" in _refused(capsys, "spaces", anchored, "--check")


@pytest.mark.parametrize(
    "param,message",
    [
        (
            "task: {grid: [ar, ar]}",
            "params.task: grid value 'ar' is listed twice; list each value once (a repeated "
            "value would run the same trials again)",
        ),
        ("model.num_heads: {grid: [1, 1, 2]}", "params.model.num_heads: grid value 1 is listed twice"),
        (
            "model.dropout: {grid: [0, 0.1, 0.0]}",
            "grid value 0 is listed twice (as 0 and 0.0: one value of this key)",
        ),
        (
            # a float key reads the quoted text '1e-3' as 0.001 (YAML 1.2 reads 1e-3 unquoted as it)
            "train.lr: {grid: [0.001, '1e-3']}",
            "grid value 0.001 is listed twice (as 0.001 and '1e-3': one value of this key)",
        ),
        (
            "model.num_heads: {choice: [1, 2, 2]}",
            "choice value 2 is listed twice; list each value once (a repeated "
            "value would be sampled twice as often)",
        ),
        ("model.embedding_norm: {grid: [true, 'true']}", "'model.embedding_norm' must be bool, got 'true'"),
    ],
)
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
    ae = (
        3 * 2 * 2
    )  # heads x masks x dropouts: the backbone is AR-only, so AE never meets local_heads' condition
    ar = (
        1 + 2 * (1 + 3) + 3
    ) * 2  # modular: 1 head, or 2/4 heads x (no local head, or one with 3 windows); llama
    assert grid_size_by_task(space) == {"ae": ae, "ar": ar} == {"ae": 12, "ar": 24}
    assert space.count_points(space.grid_values, 100) == (36, True)
    assert (
        space.count_points(space.grid_values, 3)[1] is False
    )  # more partial points kept apart than 3: stops
    for task in ("ae", "ar"):
        points = space.for_task(task).grid_points()
        assert len(points) == grid_size_by_task(space)[task]
        assert len({repr(p) for p in points}) == len(points)


@pytest.mark.parametrize(
    "path",
    [
        *sorted(BUNDLED.glob("*.yaml")),
        *(
            p for p in sorted(SPACES.glob("*.yaml")) if p.stem not in ("continuous", "halving")
        ),  # sampled only
    ],
)
def test_every_grid_space_counts_what_its_tuners_get(path):
    space = load_space(str(path))
    counts = grid_size_by_task(space)
    assert list(counts) == space.tasks()
    assert counts == {task: len(space.for_task(task).grid_points()) for task in space.tasks()}


def test_check_prints_the_trials_the_search_builds(tmp_path, capsys):
    path = _space_file(
        tmp_path,
        CONDITIONAL.replace("model.backbone: {grid: [modular, llama]", "model.backbone: {grid: [modular]"),
    )
    space = load_space(path)
    built = {task: len(space.for_task(task).grid_points()) for task in space.tasks()}  # as tuner.build_tuner
    assert main(["spaces", path, "--check"]) == 0
    assert capsys.readouterr().out.startswith(
        f"space 's' (grid search: AE {built['ae']}, AR {built['ar']} trials)"
    )
    assert built == {"ae": 12, "ar": 18}


def test_samples_that_can_only_repeat_a_trial_are_refused(tmp_path, capsys):
    """Every trial runs on the one --seed: a grid point sampled K times, or a direction with one configuration
    under random/optuna, trains the same model K times (and a grid's K copies escaped MAX_GRID_POINTS)."""
    grid = _space_file(tmp_path, "params:\n  train.lr: {grid: [0.1, 0.2]}\n")
    assert _refused(capsys, "spaces", grid, "--check", "--num-samples", "3") == (
        f"modsar: error: space '{grid}': a grid search runs each point once, but --num-samples 3 would train "
        "each "
        "point 3 times, identically (one --seed); use --num-samples 1: replicates of the selected configs on "
        "seeds 0..2 are --seeds 3"
    )
    out = tmp_path / "results"
    assert "each point 3 times" in _refused(
        capsys,
        "search",
        "--space",
        grid,
        "--dataset",
        "synthetic",
        "--num-samples",
        "3",
        "--results",
        str(out),
    )
    assert not out.exists()
    for fine in (["--num-samples", "1"], ["--search", "random", "--num-samples", "3"]):
        assert main(["spaces", grid, "--check", *fine]) == 0
    one = _space_file(
        tmp_path,
        "params:\n  task: {grid: [ae, ar]}\n  model.num_layers: {randint: [1, 2]}\n"
        "  train.lr: {uniform: [0.1, 0.2], when: {task: ar}}\n",
    )
    assert _refused(capsys, "spaces", one, "--check", "--search", "random") == (
        f"modsar: error: space '{one}': AE has one possible configuration, so the default 16 samples would "
        "train "
        "it 16 times, identically (one --seed); use --num-samples 1: replicates of the selected configs on "
        "seeds 0..15 are --seeds 16"
    )
    assert main(["spaces", one, "--check", "--search", "optuna", "--num-samples", "1"]) == 0
    two = _space_file(tmp_path, "params:\n  model.num_layers: {randint: [1, 3]}\n")
    assert main(["spaces", two, "--check", "--search", "random", "--num-samples", "5"]) == 0


HUGE = (
    "params:\n"
    + "".join(
        f"  {key}: {{grid: [{', '.join(str(v / 100) for v in range(1, 11))}]}}\n"
        for key in (
            "model.dropout",
            "model.attn_dropout",
            "train.lr",
            "train.weight_decay",
            "mask_prob",
            "model.item_sse_prob",
            "train.grad_clip",
        )
    )
    + "  train.patience: {grid: [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]}\n"
)  # 10^8 points


@pytest.fixture
def no_points_built(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("a point was built")

    monkeypatch.setattr(SearchSpace, "points", refuse)


def test_a_grid_above_the_limit_is_refused_before_any_point_is_built(tmp_path, capsys, no_points_built):
    path = _space_file(tmp_path, HUGE)
    message = (
        f"modsar: error: space '{path}': its grid has 100,000,000 points, above the 100,000 a grid search "
        "builds (modsar.sweep.spaces.MAX_GRID_POINTS); search it with --search random or --search optuna and "
        "--num-samples N, or shrink the grid"
    )
    assert _refused(capsys, "spaces", path) == message
    assert _refused(capsys, "spaces", path, "--check") == message
    out = tmp_path / "results"
    assert (
        _refused(capsys, "search", "--space", path, "--dataset", "synthetic", "--results", str(out))
        == message
    )
    assert not out.exists()


def test_a_limit_kept_apart_by_conditions_is_refused_unbuilt(no_points_built):
    """Six params a later condition reads keep 10^6 partial points apart: counting stops past the limit."""
    keys = (
        "model.dropout",
        "model.attn_dropout",
        "train.lr",
        "train.weight_decay",
        "model.item_sse_prob",
        "train.grad_clip",
    )
    params = {k: {"grid": [v / 100 for v in range(1, 11)]} for k in keys}
    params["mask_prob"] = {"grid": [0.2], "when": {k: 0.01 for k in keys}}
    space = parse_space({"params": params}, "k", "k.yaml")
    with pytest.raises(ModsarError, match="its grid has more than 100,000 points, above the 100,000"):
        grid_size_by_task(space)


def test_the_limit_is_inclusive(monkeypatch):
    monkeypatch.setattr(spaces, "MAX_GRID_POINTS", 12)
    at = parse_space(
        {
            "params": {
                "task": {"grid": ["ae", "ar"]},
                "model.num_heads": {"grid": [1, 2, 4]},
                "mask_prob": {"grid": [0.1, 0.2, 0.3], "when": {"task": "ae"}},
            }
        },
        "a",
        "a.yaml",
    )
    assert grid_size_by_task(at) == {"ae": 9, "ar": 3} and len(at.grid_points()) == 12
    above = parse_space({"params": {"train.patience": {"grid": list(range(13))}}}, "b", "b.yaml")
    with pytest.raises(ModsarError, match="its grid has 13 points, above the 12 a grid search builds"):
        above.grid_points()


def test_a_large_space_is_sampled_by_random_search_and_described(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(space_check, "CHECK_SAMPLE", 40)
    path = _space_file(tmp_path, HUGE + "budget: {search: random, num_samples: 8}\n")
    assert main(["spaces", path, "--check"]) == 0
    assert capsys.readouterr().out.strip() == (
        "space 's' (random search: AR 8 trials): all 40 configurations (a "
        "seeded sample: the space has more than 100,000 combinations) are valid"
    )
    assert main(["spaces", path]) == 0
    assert (
        f"trials (full grid): more than the grid search limit of {MAX_GRID_POINTS} (random/optuna only)"
        in capsys.readouterr().out
    )


def test_the_bundled_listing_counts_without_building(capsys, no_points_built):
    assert main(["spaces"]) == 0
    lines = {line.split()[0]: line for line in capsys.readouterr().out.splitlines()}
    assert lines.keys() == {p.stem for p in BUNDLED.glob("*.yaml")}
    assert lines["quickstart"].startswith("quickstart     AE 8, AR 4 ")
    assert lines["residual_models"].startswith("residual_models AE 1, AR 4 ")


def test_an_override_of_a_searched_key_is_refused(capsys):
    assert _refused(capsys, "spaces", "quickstart", "--check", "model.dropout=0.5") == (
        "modsar: error: override 'model.dropout=0.5' sets a key the space searches (params.model.dropout), "
        "whose "
        "values would replace it in every trial; drop the override, or copy the space file and change its "
        "params"
    )
    assert "(the 'also' of params.model.dropout)" in _refused(
        capsys, "spaces", "quickstart", "--check", "model.attn_dropout=0.0"
    )


def test_a_task_override_counts_the_direction_that_runs(tmp_path, capsys):
    path = _space_file(tmp_path, "params:\n  model.num_heads: {grid: [1, 2]}\n")
    assert main(["spaces", path, "--check", "task=ae"]) == 0
    assert capsys.readouterr().out.startswith("space 's' (grid search: AE 2 trials)")


_PROTOCOL_WHY = (
    "validation values measured under different evaluation protocols are not comparable "
    "(modsar report keeps them apart), so no trial could be selected over the others; set it in "
    "'base' and run one search per protocol"
)


@pytest.mark.parametrize(
    "param,message",
    [
        (
            "dataset: {grid: [synthetic, ml-100k]}",
            "params.dataset: a search cannot vary 'dataset': every trial runs on the search's --dataset "
            "(another "
            "dataset's trial would be selected and tested on the wrong data); remove it from params and run "
            "one search per dataset",
        ),
        (
            "seed: {grid: [0, 1]}",
            "params.seed: a search cannot vary 'seed': --seed sets every trial's seed, and --seeds K re-runs "
            "the selected configs on seeds 0..K-1 as replicates; remove it from params",
        ),
        (
            "train.max_epochs: {grid: [50, 100]}",
            "params.train.max_epochs: a search cannot vary 'train.max_epochs': the budget sets it for every "
            "trial "
            "(budget.max_epochs, or --max-epochs) and ASHA's max_t counts from it; remove it from params",
        ),
        (
            "train.eval_every: {grid: [1, 2]}",
            "params.train.eval_every: a search cannot vary 'train.eval_every': the budget sets it for every "
            "trial (budget.eval_every) and ASHA counts in its validation passes; remove it from params",
        ),
        (
            "train.monitor: {grid: [ndcg@10, recall@10]}",
            "params.train.monitor: a search cannot vary 'train.monitor': trials are stopped early and "
            "selected by one validation metric; set it in 'base' and run one search per metric",
        ),
        (
            "eval.ks: {grid: [[10], [5, 10]]}",
            "params.eval.ks: a search cannot vary 'eval.ks': it only says which cutoffs are reported, so "
            "each value "
            "would train the same model again and rows would report different metrics; set it in 'base'",
        ),
        (
            "eval.filter_seen: {grid: [none, history]}",
            f"params.eval.filter_seen: a search cannot vary 'eval.filter_seen': {_PROTOCOL_WHY}",
        ),
        (
            "eval.sampled_negatives: {grid: [0, 100]}",
            f"params.eval.sampled_negatives: a search cannot vary 'eval.sampled_negatives': {_PROTOCOL_WHY}",
        ),
        (
            "eval.sample_seed: {grid: [1, 2]}",
            f"params.eval.sample_seed: a search cannot vary 'eval.sample_seed': {_PROTOCOL_WHY}",
        ),
        (
            # an `also` target: the same, said of the `also`
            "model.positional: {grid: [learned], also: [dataset]}",
            "params.model.positional: 'also' sets 'dataset': a search cannot vary 'dataset'",
        ),
        (
            "train.patience: {grid: [3], also: [train.eval_every]}",
            "params.train.patience: 'also' sets 'train.eval_every': a search cannot vary 'train.eval_every'",
        ),
        (
            "model.num_heads: {grid: [1, 2], also: [seed]}",
            "params.model.num_heads: 'also' sets 'seed': a search cannot vary 'seed'",
        ),
    ],
)
def test_a_key_every_trial_shares_is_refused_as_a_param(tmp_path, capsys, param, message):
    """What is compared (data, protocol, monitored metric) and the budget are the search's, never searched:
    a `dataset` param tested synthetic's checkpoint on ml-100k; a `seed` or `train.max_epochs` param silently
    replaced --seed and --max-epochs."""
    path = _space_file(tmp_path, f"params:\n  {param}\n")
    expected = f"modsar: error: space '{path}': {message}"
    assert _refused(capsys, "spaces", path, "--check").startswith(expected)
    out = tmp_path / "results"
    assert _refused(
        capsys,
        "search",
        "--space",
        path,
        "--dataset",
        "synthetic",
        "--results",
        str(out),
        "--max-epochs",
        "3",
        "--seed",
        "1",
    ).startswith(expected)
    assert not out.exists()


def test_every_protocol_key_the_report_compares_is_fixed():
    from modsar.config import Config
    from modsar.report import PROTOCOL

    config_keys = [k for k in PROTOCOL if k in Config().flat()]
    assert len(config_keys) == 9  # the others (dataset_sha256, dataset_preprocessing) are not config keys
    assert all(k in spaces.FIXED_KEYS or k.startswith(spaces.FIXED_PREFIXES) for k in config_keys)


DISJOINT = """
params:
  model.backbone: {grid: [modular, gru4rec]}
  model.attn_dropout: {grid: [0.1, 0.2], when: {model.backbone: modular}}
  model.dropout: {grid: [0.3], when: {model.backbone: gru4rec}, also: [model.attn_dropout]}
"""
CHAINED = """
params:
  model.backbone: {grid: [modular, gru4rec]}
  model.gru_size: {grid: [24], when: {model.backbone: gru4rec}}
  model.attn_dropout: {grid: [0.1, 0.2], when: {model.backbone: modular}}
  model.dropout: {grid: [0.3], when: {model.gru_size: 24}, also: [model.attn_dropout]}
"""
TWO_ALSO = """
params:
  model.backbone: {grid: [modular, gru4rec]}
  mask_prob: {grid: [0.4], when: {model.backbone: modular}, also: [model.attn_dropout]}
  model.dropout: {grid: [0.3], when: {model.backbone: [gru4rec]}, also: [model.attn_dropout]}
"""
MODULAR, GRU = {"model.backbone": "modular"}, {"model.backbone": "gru4rec"}


@pytest.mark.parametrize(
    "body,trials",
    [
        (
            DISJOINT,
            [
                {**MODULAR, "model.attn_dropout": 0.1},
                {**MODULAR, "model.attn_dropout": 0.2},
                {**GRU, "model.dropout": 0.3, "model.attn_dropout": 0.3},
            ],
        ),
        (
            CHAINED,
            [
                {**MODULAR, "model.attn_dropout": 0.1},
                {**MODULAR, "model.attn_dropout": 0.2},
                # dropout's condition reads gru_size, which only gru4rec has
                {**GRU, "model.gru_size": 24, "model.dropout": 0.3, "model.attn_dropout": 0.3},
            ],
        ),
        (
            TWO_ALSO,
            [
                {**MODULAR, "mask_prob": 0.4, "model.attn_dropout": 0.4},
                {**GRU, "model.dropout": 0.3, "model.attn_dropout": 0.3},
            ],
        ),
    ],
)
def test_two_sources_of_a_key_that_never_meet_are_accepted(tmp_path, capsys, body, trials):
    path = _space_file(tmp_path, body)
    assert main(["spaces", path, "--check"]) == 0
    assert capsys.readouterr().out.strip() == (
        f"space 's' (grid search: AR {len(trials)} trials): all {len(trials)} configurations are valid"
    )
    space = load_space(path)
    assert [space.expand(point) for point in space.grid_points()] == trials


@pytest.mark.parametrize(
    "body,message",
    [
        (
            CHAINED.replace(
                "model.gru_size: {grid: [24], when: {model.backbone: gru4rec}}",
                "model.gru_size: {grid: [24]}",
            ),  # the chain's link holds everywhere: modular meets it
            "params.model.dropout: 'also' sets 'model.attn_dropout', which is searched itself",
        ),
        (
            TWO_ALSO.replace(
                "when: {model.backbone: [gru4rec]}", "when: {model.backbone: [gru4rec, modular]}"
            ),
            "params.model.dropout: 'also' sets 'model.attn_dropout', which the 'also' of params.mask_prob "
            "sets too",
        ),
        (
            "params:\n  task: {grid: [ae, ar]}\n  model.backbone: "
            "{grid: [modular, gru4rec], when: {task: ar}}\n"
            # two keys' conditions that hold together
            "  model.attn_dropout: {grid: [0.1], when: {task: ar}}\n"
            "  model.dropout: {grid: [0.3], when: {model.backbone: gru4rec}, also: [model.attn_dropout]}\n",
            "params.model.dropout: 'also' sets 'model.attn_dropout', which is searched itself",
        ),
    ],
)
def test_two_sources_of_a_key_that_can_meet_are_refused(tmp_path, capsys, body, message):
    path = _space_file(tmp_path, body)
    assert message in _refused(capsys, "spaces", path, "--check")


@pytest.mark.parametrize(
    "when,value",
    [
        ("{model.num_layers: 4}", "4"),
        ("{model.num_layers: null}", "None"),
        ("{model.num_layers: [1, 2.5]}", "2.5"),
    ],
)
def test_a_condition_on_a_range_names_a_value_in_it(tmp_path, capsys, when, value):
    """A condition that can never hold would leave its param out of every point."""
    path = _space_file(
        tmp_path,
        f"params:\n  model.num_layers: {{randint: [1, 4]}}\n  mask_prob: {{grid: [0.2], when: {when}}}\n",
    )
    assert _refused(capsys, "spaces", path, "--check") == (
        f"modsar: error: space '{path}': params.mask_prob: 'when' value {value} is never a value of "
        "'model.num_layers' (randint [1, 4]); name a value in its range"
    )


@pytest.mark.parametrize(
    "kind,when", [("uniform", "0.005"), ("loguniform", "[0.001, 0.01]"), ("uniform", "0.5")]
)
def test_a_condition_on_a_continuous_param_is_refused(tmp_path, capsys, kind, when):
    """A sampled float practically never equals the named value (sp/uwhen.yaml: num_heads was never
    searched)."""
    path = _space_file(
        tmp_path,
        f"params:\n  train.lr: {{{kind}: [0.001, 0.01]}}\n"
        f"  model.num_heads: {{grid: [2, 4], when: {{train.lr: {when}}}}}\n",
    )
    assert _refused(capsys, "spaces", path, "--check", "--search", "random") == (
        f"modsar: error: space '{path}': params.model.num_heads: 'when' names a value of 'train.lr', a "
        "continuous "
        f"param ({kind} [0.001, 0.01]) whose samples practically never equal it, so the param would almost "
        "never be searched; make 'train.lr' a choice, grid or randint param, or drop the 'when'"
    )
    choice = _space_file(
        tmp_path,
        "params:\n  train.lr: {choice: [0.001, 0.005]}\n"
        "  model.num_heads: {grid: [2, 4], when: {train.lr: 0.005}}\n",
    )
    assert main(["spaces", choice, "--check", "--search", "random", "--num-samples", "2"]) == 0


def test_an_override_of_a_conditional_param_sets_it_where_the_condition_fails(capsys):
    """residual_models searches model.dropout only for gru4rec: the override is the other models' dropout."""
    from modsar.sweep.plan import SearchRequest, make_plan, trial_config

    assert main(["spaces", "residual_models", "--check", "model.dropout=0.4"]) == 0
    assert capsys.readouterr().out.startswith("space 'residual_models' (grid search: AE 1, AR 4 trials): all")
    request = SearchRequest(space="residual_models", dataset="", overrides=["model.dropout=0.4"])
    plan = make_plan(request, check=False)
    dropouts = {
        (point["task"], point.get("model.backbone", "modular")): (cfg.model.dropout, cfg.model.attn_dropout)
        for point in plan.space.grid_points()
        for cfg in [trial_config(plan.base, plan.space, point)]
    }
    assert dropouts == {
        ("ar", "modular"): (0.4, 0.5),
        ("ar", "bsarec"): (0.4, 0.5),
        ("ar", "gru4rec"): (0.3, 0.3),
        ("ar", "duorec"): (0.4, 0.5),
        ("ae", "modular"): (0.4, 0.5),
    }


TWO_SOURCES = (
    "  model.attn_dropout: {grid: [0.1], when: {model.backbone: modular}}\n"
    "  model.dropout: {grid: [0.3], when: {model.backbone: gru4rec}, "
    "also: [model.attn_dropout]}\n"
)


@pytest.mark.parametrize(
    "params,refused",
    [
        # set in every point by two conditional sources together: the override could never take effect
        (
            "  model.backbone: {grid: [modular, gru4rec]}\n" + TWO_SOURCES,
            "(params.model.attn_dropout and the 'also' of params.model.dropout)",
        ),
        ("  model.backbone: {grid: [modular, gru4rec, bsarec]}\n" + TWO_SOURCES, None),  # bsarec keeps it
        (
            "  train.patience: {randint: [1, 3]}\n"  # every value the range has
            "  model.attn_dropout: {grid: [0.1], when: {train.patience: [1, 2]}}\n",
            "(params.model.attn_dropout)",
        ),
        (
            "  train.patience: {randint: [1, 4]}\n"  # patience 3 keeps the override
            "  model.attn_dropout: {grid: [0.1], when: {train.patience: [1, 2]}}\n",
            None,
        ),
    ],
)  # a condition on a continuous param is refused: test_a_condition_on_a_continuous_param_is_refused
def test_an_override_is_refused_only_where_it_never_takes_effect(tmp_path, capsys, params, refused):
    path = _space_file(tmp_path, f"params:\n{params}budget: {{search: random}}\n")
    if refused is None:
        assert main(["spaces", path, "--check", "model.attn_dropout=0.0"]) == 0
    else:
        assert _refused(capsys, "spaces", path, "--check", "model.attn_dropout=0.0") == (
            f"modsar: error: override 'model.attn_dropout=0.0' sets a key the space searches {refused}, "
            "whose values would replace it in every trial; drop the override, or copy the space file and "
            "change its params"
        )


def _laughs(levels: int) -> str:
    """A nested-alias ("billion laughs") space: each level repeats the one before it ten times."""
    lines = ["lol: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    lines += [f"l{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, levels)]
    body = "\n".join(lines).replace("lol: &a0", "paper: &a0")
    return body.replace(f"l{levels - 1}: ", "description: ") + "\nparams:\n  model.dropout: {grid: [0.1]}\n"


def test_nested_aliases_are_refused_before_they_are_expanded(tmp_path, capsys):
    path = _space_file(tmp_path, _laughs(6))  # 10^6 values once copied out; laughs3's 10^10 is the same line
    assert _refused(capsys, "spaces", path, "--check") == (
        f"modsar: error: space file '{path}' expands its YAML aliases (*name) into more than 10,000 values "
        "beyond those written (aliases nested in anchors); a space needs a few hundred values: write them "
        "out, or use anchors that do not nest"
    )
    path = _space_file(tmp_path, "description: &d [x, *d]\nparams:\n  model.dropout: {grid: [0.1]}\n")
    assert _refused(capsys, "spaces", path) == (
        f"modsar: error: space file '{path}' holds a value that contains itself through a YAML alias; a "
        "space needs a few hundred values: write them out, or use anchors that do not nest"
    )


def test_anchors_that_do_not_nest_still_load(tmp_path):
    path = _space_file(
        tmp_path,
        "params:\n  model.backbone: {grid: [modular, gru4rec]}\n"
        "  model.ffn_size: {grid: [32], when: &m {model.backbone: modular}}\n"
        "  model.activation: {grid: [relu], when: *m}\n",
    )
    assert [p.when for p in load_space(path).params[1:]] == [{"model.backbone": ["modular"]}] * 2


@pytest.mark.parametrize("field,value,kind", [("description", "[a, b]", "list"), ("paper", "{a: b}", "dict")])
def test_description_and_paper_are_one_line_of_text(tmp_path, capsys, field, value, kind):
    path = _space_file(tmp_path, f"{field}: {value}\nparams:\n  model.dropout: {{grid: [0.1]}}\n")
    assert _refused(capsys, "spaces", path) == (
        f"modsar: error: space '{path}': '{field}' must be one line of text, got a {kind}; quote it if it "
        "holds brackets or a colon"
    )


def test_a_directory_given_as_a_space_file_is_named_as_one(tmp_path, capsys, monkeypatch):
    folder = tmp_path / "mine.yaml"
    folder.mkdir()
    message = (
        f"modsar: error: space file '{folder}' is a directory; pass a space's YAML file, or a bundled "
        "space's name (`modsar spaces` lists them)"
    )
    assert _refused(capsys, "spaces", str(folder), "--check") == message
    assert (
        _refused(
            capsys,
            "search",
            "--space",
            str(folder),
            "--dataset",
            "synthetic",
            "--results",
            str(tmp_path / "r"),
        )
        == message
    )
    (folder / "a.yaml").write_text("params:\n  model.dropout: {grid: [0.1]}\n")
    assert _refused(capsys, "spaces", str(folder)) == message.replace(
        "YAML file,", f"YAML file such as '{folder / 'a.yaml'}',"
    )
    monkeypatch.chdir(tmp_path)  # a folder named like a bundled space does not hide it
    (tmp_path / "quickstart").mkdir()
    assert load_space("quickstart").path == str(BUNDLED / "quickstart.yaml")


@pytest.mark.parametrize(
    ("base", "message"),
    [
        (
            "train.max_epochs: 5",
            "base.train.max_epochs: 'train.max_epochs' is not a base setting: the budget sets it",
        ),
        ("seed: 3", "base.seed: 'seed' is not a base setting: --seed sets every trial's seed"),
        (
            "dataset: synthetic",
            "base.dataset: 'dataset' is not a base setting: the search runs on its --dataset",
        ),
        (
            "model.dropout: 0.5",
            "base.model.dropout: params.model.dropout sets 'model.dropout' in every trial, so the "
            "base value never runs; remove it from base",
        ),
    ],
)
def test_a_base_value_that_never_runs_is_refused(tmp_path, capsys, base, message):
    space = tmp_path / "s.yaml"
    space.write_text(f"base: {{{base}}}\nparams:\n  model.dropout: {{grid: [0.1, 0.3]}}\n")
    assert main(["spaces", str(space), "--check"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0]


def test_a_base_value_for_where_a_conditional_param_is_off_is_kept(tmp_path, capsys):
    space = tmp_path / "s.yaml"
    space.write_text(
        "base: {mask_prob: 0.3}\nparams:\n  task: {grid: [ae, ar]}\n"
        "  mask_prob: {grid: [0.2, 0.4], when: {task: ae}}\n"
    )
    assert main(["spaces", str(space), "--check"]) == 0
