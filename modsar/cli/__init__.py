"""`modsar` command line: one module per command, each a thin layer over the package (the Python API in
modsar/api.py calls the same functions) holding its help text, its options and the function that runs it.

  data      import, prepare and inspect datasets (prepare, stats, profile, list)
  train     train and evaluate one configuration, and record its row
  evaluate  the metrics of a saved checkpoint, without training again
  search    search a design space with Ray Tune (ASHA; grid, random, optuna)
  spaces    list the bundled design spaces, describe, check or cost one
  results   list and filter trial rows (Parquet)
  report    the paper's AE-vs-AR tables, seed statistics and plots
  analyze   attention sparsity/rank and last-item-reliance diagnostics
  generate  H-step rollouts from each test user's history vs the true future
  submit    run a modsar command on a Ray cluster (Ray Job Submission)

`modsar COMMAND --help` teaches each with examples. Starting the CLI imports no torch: every command imports
what it needs when it runs."""

from __future__ import annotations

import argparse
import contextlib
import sys

from modsar.cli import analyze, data, evaluate, generate, report, results, search, spaces, submit, train
from modsar.cli.common import Parser, check_folders
from modsar.errors import ModsarError
from modsar.outputs import fault_line, redact
from modsar.version import __version__

COMMANDS = (data, train, evaluate, search, spaces, results, report, analyze, generate, submit)  # --help order


def build_parser() -> argparse.ArgumentParser:
    """The `modsar` parser: each command module adds its sub-command (options, help, handler)."""
    parser = Parser(
        prog="modsar",
        description="Modular self-attentive sequential "
        "recommendation: compare bidirectional (AE) and causal (AR) attention.",
    )
    # what a bug report, a cluster image or a prepared dataset's `modsar_version` is compared with
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for command in COMMANDS:
        command.add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run one command; its exit status: 0, 2 for a ModsarError (printed as one line), 130 on Ctrl-C, 1 for
    any other exception (one redacted line: `internal_error`)."""
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    # KEY=VALUE overrides may come after options (e.g. `train --quiet task=ae`); anything else is an error.
    stray = [a for a in extra if a.startswith("-") or "=" not in a or not hasattr(args, "overrides")]
    if args.command == "submit":
        stray = []
    if stray:
        parser.error(f"unrecognized arguments: {' '.join(stray)}")
    if extra:
        args.overrides = [*args.overrides, *extra]
    # with --json, stdout is the JSON document alone: the command runs with sys.stdout pointing at stderr, so
    # nothing a plugin, Ray or another library prints can corrupt it, and print_json writes to the real one
    args.json_stdout = sys.stdout
    try:
        check_folders(args)  # before any work: a result computed and then lost to a bad path helps nobody
        with (
            contextlib.redirect_stdout(sys.stderr)
            if getattr(args, "json", False)
            else contextlib.nullcontext()
        ):
            return args.handler(args)
    except ModsarError as exc:  # no message shows the password of a URI (modsar.outputs.redact)
        print(f"modsar: error: {redact(str(exc))}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as exc:  # Ctrl-C has no message; one raised by a plugin says where
        print(f"modsar: interrupted{f' {redact(str(exc))}' if str(exc) else ''}", file=sys.stderr)
        return 130
    except BrokenPipeError:  # output piped into `head` and closed early
        sys.stderr.close()
        return 0
    except OSError as exc:  # a full disk, a read-only folder or a denied permission met outside atomic_write
        if (line := fault_line(exc)) is None:
            return internal_error(exc)
        print(f"modsar: error: {line}", file=sys.stderr)
        return 2
    except Exception as exc:  # a bug (ModSAR's, a plugin's, a library's): its message may quote a password
        return internal_error(exc)


TRACEBACK_ENV = "MODSAR_TRACEBACK"  # set to 1: an internal error prints its whole traceback (redacted)


def internal_error(exc: BaseException) -> int:
    """Exit status 1 for an exception no command expected: one line, `modsar: internal error: TYPE: first
    line of its message`, redacted like every message (a traceback quotes the values it met, URIs with
    passwords among them), and how to see the traceback: with MODSAR_TRACEBACK=1, every line redacted."""
    import os
    import traceback

    if os.environ.get(TRACEBACK_ENV, "") not in ("", "0"):
        text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
        print(redact(text), file=sys.stderr, end="")
    message = (str(exc).strip().splitlines() or [""])[0]
    line = f"{type(exc).__name__}: {message}" if message else type(exc).__name__
    print(
        f"modsar: internal error: {redact(line)} (a bug: run again with {TRACEBACK_ENV}=1 for the full "
        "traceback, and report it)",
        file=sys.stderr,
    )
    return 1


if __name__ == "__main__":
    sys.exit(main())
