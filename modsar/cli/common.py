"""What several commands share: how a sub-command is added, the --data-dir option, the checks of folder
options before any work, the JSON output of --json, and the metrics table `train` and `evaluate` print.

Only the standard library and modsar's light modules are imported here: `modsar --help` and `modsar spaces`
must start without torch."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn, TypeAlias

from modsar.outputs import is_uri

Subparsers: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"  # what add_subparsers returns
Handler: TypeAlias = Callable[[argparse.Namespace], int]


class Parser(argparse.ArgumentParser):
    """An ArgumentParser whose epilog may be a function, called only when the help is shown: a text that
    reads the backbone registry (which imports plugins) costs nothing to a command that does not print it,
    and a plugin's failure or output is met inside `main`, as for any command."""

    def format_help(self) -> str:
        if callable(self.epilog):
            self.epilog = self.epilog()
        return super().format_help()

    def error(self, message: str) -> NoReturn:
        """A usage error, with the password of any URI it quotes (an unknown option's value) hidden."""
        from modsar.outputs import redact

        super().error(redact(message))


def add_command(
    sub: Subparsers,
    name: str,
    help_text: str,
    run: Handler,
    epilog: str | Callable[[], str] | None = None,
) -> argparse.ArgumentParser:
    """A sub-command's parser, run by `run`. An epilog (its examples) keeps its line breaks as written."""
    layout: dict[str, Any] = (
        {"epilog": epilog, "formatter_class": argparse.RawDescriptionHelpFormatter} if epilog else {}
    )
    parser = sub.add_parser(name, help=help_text, **layout)
    parser.set_defaults(handler=run)
    return parser


def add_data_dir(parser: argparse.ArgumentParser) -> None:
    """The --data-dir option of every command that reads (or, for `data prepare`, writes) datasets."""
    parser.add_argument(
        "--data-dir", help="prepared-datasets folder (default: $MODSAR_DATA or ~/.cache/modsar/datasets)"
    )


def print_json(args: argparse.Namespace, document: str) -> None:
    """Print the JSON document of a --json command to the real stdout. `main` runs such a command with
    sys.stdout pointing at stderr, so that whatever plugins or libraries print, stdout parses as JSON."""
    print(document, file=getattr(args, "json_stdout", None) or sys.stdout, flush=True)


def check_folders(args: argparse.Namespace) -> None:
    """Refuse a URI with credentials in any option (`check_credentials`), and a folder option that names, or
    lies under, a file, or (where the command writes there) a folder that cannot be written: --out, the
    --results of train and search, the --data-dir of data prepare."""
    from modsar.outputs import ensure_writable_dir, refuse_empty_folder

    check_credentials(args)
    check_names(args)
    for dest in FOLDER_OPTIONS:
        refuse_empty_folder(f"--{dest.replace('_', '-')}", getattr(args, dest, None))
    if getattr(args, "data_dir", None):  # only `data prepare` must write there; the others may read a copy
        ensure_writable_dir(
            args.data_dir, "--data-dir", write=getattr(args, "data_command", None) == "prepare"
        )
    if getattr(args, "out", None):
        ensure_writable_dir(args.out, "--out")
    if args.command in ("train", "search") and not getattr(args, "list_keys", False):
        ensure_writable_dir(args.results, "--results")
        if args.experiment and not is_uri(args.results):
            ensure_writable_dir(Path(args.results) / args.experiment, "--results")


FOLDER_OPTIONS = ("results", "out", "data_dir")  # the options that name a folder

# options that keep their own check of credentials in a URI: a search takes them out of these three
# (sweep.credentials); submit refuses them in the job's command and its --env (cli.submit.parse_env, which
# says the nodes' own environment must hold them), and its --address goes to the dashboard alone
OWN_CREDENTIALS = {"search": {"mlflow", "results", "address"}, "submit": {"rest", "address", "env"}}
POSITIONAL = {"overrides": "override", "name": "name"}


def check_credentials(args: argparse.Namespace) -> None:
    """Refuse, before any work and in one line that shows it redacted, any option's URI that carries a
    password or a secret query value (modsar.outputs.refuse_credentials): ModSAR never prints credentials or
    writes them to disk, and takes them only from the environment or credential files. The environment's
    MODSAR_DATA, RAY_ADDRESS and RAY_DASHBOARD_ADDRESS too, naming the variable (submit's --address takes
    RAY_DASHBOARD_ADDRESS as its default, and keeps the check of its own --address)."""
    from modsar.outputs import refuse_credentials, refuse_environment_credentials

    refuse_environment_credentials(skip=("RAY_DASHBOARD_ADDRESS",) if args.command == "submit" else ())
    own = OWN_CREDENTIALS.get(args.command, set())
    for dest, given in sorted(vars(args).items()):
        if dest in own or dest in ("handler", "json_stdout"):
            continue
        option = POSITIONAL.get(dest, f"--{dest.replace('_', '-')}")
        for value in given if isinstance(given, list) else [given]:
            if isinstance(value, str):
                refuse_credentials(option, value)


def check_names(args: argparse.Namespace) -> None:
    """Refuse, before any work and naming the option, a dataset or experiment name that cannot be a folder
    under its root (modsar.outputs.check_name): --experiment and --dataset of every command, a data
    command's NAME, and the experiment a search would name by default (<space>-<dataset>)."""
    from modsar.outputs import check_name

    named: list[tuple[str, Any]] = [
        ("--experiment", getattr(args, "experiment", None)),
        ("--dataset", getattr(args, "dataset", None)),
    ]
    if args.command == "data":
        named.append(("dataset name", getattr(args, "name", None)))
    for option, given in named:
        for value in given if isinstance(given, list) else [given]:
            if value is not None:
                check_name(value, option)
    if args.command == "search" and not args.experiment and args.dataset:
        default = f"{Path(args.space).stem}-{args.dataset}"
        check_name(default, "the default experiment name <space>-<dataset> (pass --experiment to choose one)")


def metrics_table(ks: list[int], splits: dict[str, dict[str, float]]) -> str:
    """Recall, NDCG and MRR at every k, one line per split (what `train` and `evaluate` print)."""
    names = [f"{m}@{k}" for m in ("recall", "ndcg", "mrr") for k in ks]
    lines = ["split  " + "".join(name.rjust(11) for name in names)]
    lines += [
        f"{split:<7}" + "".join(f"{metrics[name]:>11.4f}" for name in names)
        for split, metrics in splits.items()
    ]
    return "\n".join(lines)
