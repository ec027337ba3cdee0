"""The ``trustlit`` command: a light dispatcher in front of LightningCLI.

    trustlit --help                                  # every command (imports no torch)
    trustlit recipes [DIR]                           # shipped recipes by name, with descriptions (no torch)
    trustlit fit -c RECIPE [--key value ...]         # RECIPE: a path, or a listed name (unlearning/simnpo_tofu)
    trustlit validate|test|predict -c RECIPE [--ckpt_path last]
    trustlit compare [LABEL=]EVAL.json ...           # unlearning evaluations side by side
    trustlit slurm submit RECIPE [...] [-- ...]      # submit to SLURM (see trustlit/slurm.py)

Only the Lightning subcommands import Lightning (:mod:`trustlit.lightning_cli`), and there only the
packages of the classes the recipe names (:mod:`trustlit.registry`).
"""

from __future__ import annotations

import os
import sys
from argparse import ArgumentError
from collections.abc import Sequence
from typing import Any

LIGHTNING_COMMANDS = {
    "fit": "train a model (a method's LightningModule) on a DataModule",
    "validate": "evaluate on the validation splits",
    "test": "evaluate on the test splits (and run analysis modules that do not train)",
    "predict": "run predict_step over the data (generation, activation harvesting)",
}
LIGHT_COMMANDS = {
    "recipes": "list the shipped recipes by name: trustlit recipes [DIR]",
    "compare": "unlearning evaluations side by side: trustlit compare [LABEL=]EVAL.json ...",
    "slurm": "render and submit a recipe as a SLURM job: trustlit slurm submit RECIPE [--dry-run] [-- OVERRIDES]",
}


def usage() -> str:
    width = max(map(len, [*LIGHTNING_COMMANDS, *LIGHT_COMMANDS]))
    lines = ["usage: trustlit COMMAND [ARGS]", "", "commands:"]
    lines += [f"  {name:<{width}}  {text}" for name, text in {**LIGHTNING_COMMANDS, **LIGHT_COMMANDS}.items()]
    lines += [
        "",
        "`trustlit COMMAND --help` gives a command's options; a recipe is a path or a name from `trustlit recipes`.",
        "Errors print one line; TRUSTLIT_DEBUG=1 (or --debug) shows the full traceback.",
    ]
    return "\n".join(lines)


def _print_recipes(args: Sequence[str]) -> None:
    from pathlib import Path

    from trustlit.resources import list_recipes

    for name, description in list_recipes(Path(args[0]) if args else None):
        print(f"{name}  {description}")


def _compare(paths: Sequence[str]) -> None:
    if not paths:
        raise SystemExit("usage: trustlit compare [LABEL=]EVAL.json ... (files written by UnlearningEvaluation)")
    from rich.console import Console

    from trustlit.unlearning.evaluation import compare_runs

    Console().print(compare_runs(list(paths)))


def run_cli(args: list[str] | None = None) -> Any:
    """Run LightningCLI on ``args`` (default ``sys.argv[1:]``) and return it (trainer, model, data)."""
    from trustlit.lightning_cli import run_cli as run_lightning_cli

    return run_lightning_cli(args)


# What a user can get wrong: bad values and keys, missing or malformed files. Anything else is a bug and
# keeps its traceback.
USER_ERRORS = (ValueError, OSError, KeyError, TypeError, RuntimeError, ArgumentError)
USAGE_ERRORS = ("ConfigError", "ArgumentError", "MisconfigurationException")


def _dispatch(argv: list[str]) -> None:
    command = argv[0] if argv else None
    if command in (None, "-h", "--help", "help"):
        print(usage())
    elif command == "recipes":
        _print_recipes(argv[1:])
    elif command == "compare":
        _compare(argv[1:])
    elif command == "slurm":
        from trustlit.slurm import main as slurm_main

        slurm_main(argv[1:])
    elif command in LIGHTNING_COMMANDS:
        run_cli(argv)
    else:
        raise SystemExit(f"trustlit: unknown command '{command}'; valid are {[*LIGHTNING_COMMANDS, *LIGHT_COMMANDS]}")


def _is_user_error(error: Exception) -> bool:
    return isinstance(error, USER_ERRORS) or any(c.__name__ == "MisconfigurationException" for c in type(error).__mro__)


def main(args: list[str] | None = None) -> None:
    """Entry point of ``trustlit``; ``args`` replaces ``sys.argv[1:]`` (tests call it in-process).

    An error prints ``trustlit: error: <one line>`` and exits with 2 (a bad key or value) or 1;
    ``--debug`` (anywhere) or ``TRUSTLIT_DEBUG=1`` lets it through with its traceback."""
    argv = sys.argv[1:] if args is None else list(args)
    debug = "--debug" in argv or os.environ.get("TRUSTLIT_DEBUG", "") not in ("", "0")
    argv = [arg for arg in argv if arg != "--debug"]
    try:
        _dispatch(argv)
    except Exception as error:
        if debug or not _is_user_error(error):
            raise
        from trustlit.errors import one_line, root_message

        print(f"trustlit: error: {one_line(root_message(error))}", file=sys.stderr)
        usage_error = any(c.__name__ in USAGE_ERRORS for c in type(error).__mro__)
        raise SystemExit(2 if usage_error else 1) from None


if __name__ == "__main__":
    main()
