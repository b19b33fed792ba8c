"""The Python API, for notebooks and scripts: `import modsar`, then

    row = modsar.train({"task": "ae", "model.hidden_size": 64}, dataset="ml-100k")
    modsar.evaluate(row["checkpoint"])["ndcg@10"]
    model, config = modsar.load(row["checkpoint"])
    modsar.results("train-ml-100k", where={"task": "ae"})
    modsar.search("quickstart", "synthetic")

Each function is the command of the same name without its printing: it calls the functions the CLI calls
(modsar.records.run, modsar.training.checkpoints, modsar.records.rows, modsar.sweep), so a row written here is
the row `modsar train` would write, and a failure is the same one-line ModsarError the CLI prints. train,
evaluate, load and search leave the caller's global random generators and torch's thread count as they found
them (a notebook's loop between calls draws its own stream, not the run's seed)."""

from __future__ import annotations

import dataclasses
import functools
import inspect
import re
import warnings
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path, PurePath
from typing import TYPE_CHECKING, Any, TypeVar

from modsar.outputs import is_uri  # standard library only

if TYPE_CHECKING:  # the API is imported with `modsar`: torch, pandas and Ray load when a function is called
    import pandas as pd

    from modsar.config import Config
    from modsar.model.interface import Recommender


F = TypeVar("F", bound=Callable[..., Any])


def _keeps_caller_state(function: F) -> F:
    """`function` leaves the caller's global random generators (python, numpy, torch, CUDA) and torch's thread
    count as it found them, on return and on an exception (modsar.randomness.caller_state_kept): a run
    seeds and sizes them for itself, and a notebook's own draws between calls must not repeat the run's seed.
    What the run computes is unchanged. torch is imported when the function is called, not with the API."""

    @functools.wraps(function)
    def kept(*args: Any, **kwargs: Any) -> Any:
        from modsar.randomness import caller_state_kept

        with caller_state_kept():
            return function(*args, **kwargs)

    return kept  # type: ignore[return-value]


def _refuses_credentials(*own: str) -> Callable[[F], F]:
    """The function refuses, before any work and in one line that shows it redacted, a URI with a password
    or a secret query value in any of its text arguments (inside lists, tuples, mappings and a Config too,
    and a Path's text), and in MODSAR_DATA, RAY_ADDRESS and RAY_DASHBOARD_ADDRESS: what the CLI refuses in
    its options (modsar.cli.common.check_credentials), named by the argument. `own`: the arguments that keep
    a check of their own (a search takes the credentials out of its mlflow, results and address URIs)."""

    def decorate(function: F) -> F:
        signature = inspect.signature(function)

        @functools.wraps(function)
        def refused(*args: Any, **kwargs: Any) -> Any:
            from modsar.outputs import refuse_credentials, refuse_environment_credentials

            try:
                bound = signature.bind(*args, **kwargs)
            except TypeError:  # the call itself is wrong: the function says how, as Python does
                return function(*args, **kwargs)
            for name, value in bound.arguments.items():
                keyed = signature.parameters[name].kind is inspect.Parameter.VAR_KEYWORD
                for where, text in _texts(value, name, keyed):
                    if where.partition("[")[0] not in own:
                        refuse_credentials(where, text)
            refuse_environment_credentials()
            return function(*args, **kwargs)

        return refused  # type: ignore[return-value]

    return decorate


def _texts(value: Any, name: str, keyed: bool = False) -> Iterator[tuple[str, str]]:
    """(where, text) of every text in an argument: itself, its items, a mapping's values (where: the
    argument and the key; `keyed`: the key alone, for **options), a dataclass's fields. A Path's text gets
    its URI scheme's '//' back (Path("s3://k:s@b") reads "s3:/k:s@b")."""
    from modsar.config import Config  # light: the package has imported it already

    if isinstance(value, str):
        yield name, value
    elif isinstance(value, PurePath):
        yield name, re.sub(r"^([A-Za-z][A-Za-z0-9+.-]*:)/(?!/)", r"\1//", str(value))
    elif isinstance(value, Mapping):
        for key, item in value.items():
            yield from _texts(item, str(key) if keyed else f"{name}[{key!r}]")
    elif isinstance(value, (list, tuple, set, frozenset)):
        for item in value:
            yield from _texts(item, name)
    elif isinstance(value, Config):  # its tree, the own backbone's settings section included
        yield from _texts(value.to_dict(), name)
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        yield from _texts(dataclasses.asdict(value), name)


def _config(
    config: Config | Mapping[str, Any] | str | Path | list[str] | None, dataset: str | None
) -> Config:
    """A Config from what a notebook has at hand: a Config, a mapping of dotted keys (nested mappings too), a
    YAML file, or `key=value` strings, with `dataset` on top; checked as `modsar train` checks it. A Config
    object is read as the mapping of its values (config_values), set on a fresh one and checked by the same
    function as a mapping: its types and choices too, and the caller's object is never changed."""
    from modsar.config import Config, apply_overrides, config_values, flatten, load_config
    from modsar.errors import ModsarError

    if isinstance(config, Config):
        values = config_values(config)
        return apply_overrides(Config(), {**values, **({} if dataset is None else {"dataset": dataset})})
    extra = [f"dataset={dataset}"] if dataset is not None else []
    if config is None or isinstance(config, (str, Path)):
        return load_config(config, extra)
    if isinstance(config, Mapping):
        cfg = apply_overrides(Config(), flatten(dict(config)), "config")
        return apply_overrides(cfg, {"dataset": dataset}, "config") if dataset is not None else cfg
    if isinstance(config, (list, tuple)) and all(isinstance(item, str) for item in config):
        return load_config(None, [*config, *extra])
    raise ModsarError(
        f"config must be a mapping of keys ({{'task': 'ae'}}), a YAML path, a Config or a list of "
        f"'key=value' strings; got {type(config).__name__}"
    )


def _text(path: str | Path | None) -> str | None:
    """A path given as str or Path, as the functions below take it (with ~ expanded)."""
    return None if path is None else str(Path(path).expanduser())


@_refuses_credentials()
@_keeps_caller_state
def train(
    config: Config | Mapping[str, Any] | str | Path | list[str] | None = None,
    dataset: str | None = None,
    *,
    experiment: str | None = None,
    results: str | Path = "results",
    data_dir: str | Path | None = None,
    checkpoint: bool = True,
    progress: bool = True,
) -> dict[str, Any]:
    """Train one configuration as `modsar train` does and return its row (a dict: config keys, valid.* and
    test.* metrics, facts; `row["checkpoint"]` is the best checkpoint's path). The row is also written to
    <results>/<experiment>/trials/, so `modsar results` and `modsar report` see it.

    `config`: a mapping of dotted keys ({"task": "ae", "model.hidden_size": 64}), a YAML path, a Config, or
    ["key=value", ...]; None is the defaults (an AR SASRec-style model). `dataset` names a prepared
    dataset."""
    from modsar.outputs import refuse_empty_folder
    from modsar.records.run import train_and_record

    refuse_empty_folder("results", results)
    run = train_and_record(
        _config(config, dataset), str(results), experiment, _text(data_dir), checkpoint, progress
    )
    return run.row


@_refuses_credentials()
@_keeps_caller_state
def evaluate(
    checkpoint: str | Path,
    split: str = "test",
    *,
    filter_seen: str | None = None,
    ks: list[int] | None = None,
    sampled_negatives: int | None = None,
    device: str | None = None,
    data_dir: str | Path | None = None,
) -> dict[str, float]:
    """The metrics ({"ndcg@10": ...}) of a saved checkpoint (a train .pt, or a search row's checkpoint folder)
    on its dataset's `valid` or `test` targets, as `modsar evaluate`. With no option the stored protocol is
    used, on the device the row was tested on (device None), and the metrics equal the row's; a changed
    protocol is warned about (the row was not selected and tested under it), as is a result that differs from
    the row's beside the checkpoint."""
    from modsar.outputs import redact
    from modsar.records.rescore import evaluate_checkpoint

    scores = evaluate_checkpoint(
        checkpoint,
        split,  # local_checkpoint expands ~ and reads URIs
        filter_seen=filter_seen,
        ks=ks,
        sampled_negatives=sampled_negatives,
        device=None if device is None else str(device),
        data_dir=_text(data_dir),
        option="device",
    )
    if not scores.comparable:  # the paths shown redacted, as in every message
        changes = ", ".join(f"{k}={used} (stored: {stored})" for k, (stored, used) in scores.changed.items())
        warnings.warn(
            redact(
                f"{checkpoint}: evaluated under another protocol than its run was selected and tested "
                f"under: {changes}"
            ),
            stacklevel=2,
        )
    elif scores.row_differences():
        warnings.warn(
            redact(
                f"{checkpoint}: {split} metrics differ from its row {scores.row_trial_id}: "
                f"{scores.row_differences()}"
            ),
            stacklevel=2,
        )
    return scores.metrics


@_refuses_credentials()
@_keeps_caller_state
def load(checkpoint: str | Path, device: str = "cpu") -> tuple[Recommender, Config]:
    """The model of a saved checkpoint (in eval mode, on `device`) and its configuration. Evaluation scores
    with `model.score(encode(model, inputs, users)[:, -1], users)` (modsar.model.interface.encode)."""
    from modsar import devices
    from modsar.training.checkpoints import load_checkpoint, local_checkpoint

    with local_checkpoint(checkpoint) as path:
        model, cfg, _ = load_checkpoint(path, str(devices.resolve(str(device), "device")))
    return model, cfg


@_refuses_credentials()
def results(
    experiment: str | None = None,
    where: Mapping[str, Any] | list[str] | str | None = None,
    *,
    root: str | Path = "results",
) -> pd.DataFrame:
    """The trial rows (a DataFrame, one row per trial) of `experiment`, or of every experiment under `root`,
    as `modsar results` lists them: `where` keeps the rows whose columns equal each value ({"task": "ar",
    "selected": True}, or ["task=ar", ...]): numbers by value, text in any case, None (or "") a missing
    value."""
    from modsar.errors import ModsarError
    from modsar.records.rows import matching_rows

    if isinstance(where, Mapping):
        conditions = [f"{k}={'' if v is None else v}" for k, v in where.items()]  # None: a missing value
    elif isinstance(where, str):
        conditions = [where]
    elif where is None or (isinstance(where, (list, tuple)) and all(isinstance(c, str) for c in where)):
        conditions = list(where or [])
    else:
        raise ModsarError(
            f"where must be a mapping ({{'task': 'ar'}}) or 'key=value' strings; got {type(where).__name__}"
        )
    root = str(root) if is_uri(root) else _text(root) or "results"
    return matching_rows(root, experiment, conditions, option="where").reset_index(drop=True)


@_refuses_credentials("mlflow", "results", "address")
@_keeps_caller_state
def search(
    space: str | Path, dataset: str, overrides: list[str] | str | None = None, **options: Any
) -> pd.DataFrame:
    """Search a design space (a bundled name or a YAML path) on a prepared dataset, as `modsar search` does,
    and return the experiment's rows; the selected ones have `selected` True and test.* metrics.

    `options` are SearchRequest's fields, as the CLI's options with dashes as underscores: experiment,
    results, search, full_grid, num_samples, max_epochs, time_budget_s, max_t, grace_period, reduction_factor,
    cpus_per_trial, gpus_per_trial, max_concurrent, max_failures, fresh_actors, seed, seeds, address,
    data_dir, quiet, resume, overwrite, dashboard, mlflow. A search that selects nothing for a model it
    trained raises."""
    import dataclasses

    from modsar.errors import ModsarError
    from modsar.records.rows import read_rows
    from modsar.sweep import SearchRequest, run_search

    fields = {f.name for f in dataclasses.fields(SearchRequest)} - {"space", "dataset", "overrides"}
    unknown = sorted(set(options) - fields)
    if unknown:
        raise ModsarError(
            f"modsar.search: unknown option {unknown[0]!r}; options: {', '.join(sorted(fields))}"
        )
    given = [overrides] if isinstance(overrides, str) else list(overrides or [])
    paths: dict[str, Any] = {k: str(v) if isinstance(v, Path) else v for k, v in options.items()}
    if not isinstance(dataset, str) or not dataset:  # "" plans without data (modsar spaces --check) only
        raise ModsarError(f"dataset must name a prepared dataset (modsar data list); got {dataset!r}")
    request = SearchRequest(space=str(space), dataset=dataset, overrides=given, **paths)
    summary = run_search(request)
    if summary["problem"]:
        raise ModsarError(summary["problem"])
    return read_rows(request.results, request.experiment_name).reset_index(drop=True)
