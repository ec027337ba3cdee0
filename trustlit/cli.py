"""The ``trustlit`` command: LightningCLI for recipes, plus ``trustlit recipes``.

    trustlit fit -c recipes/quickstart/finetune_fictitious.yaml [--key value ...]
    trustlit fit -c RECIPE --ckpt_path last          # resume from <default_root_dir>/checkpoints
    trustlit test -c RECIPE --ckpt_path last
    trustlit recipes [DIR]                           # list recipes with their descriptions
    trustlit compare [LABEL=]EVAL.json ...           # unlearning evaluations side by side
    trustlit slurm submit RECIPE [...] [-- ...]      # submit to SLURM (see trustlit/slurm.py)

Model and data are chosen by class (``class_path``) in subclass mode; short names resolve
because this module imports every method package. Checkpoints always include ``last.ckpt``,
in ``<trainer.default_root_dir>/checkpoints`` unless ``checkpoint.dirpath`` says otherwise,
so ``--ckpt_path last`` finds them from a new process. The full parsed config is written
next to the logs and logged to every logger as hyperparameters.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import lightning as L
import yaml
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.cli import LightningArgumentParser, LightningCLI, SaveConfigCallback
from rich.console import Console

import trustlit.classifiers

# imported so that short class names resolve in recipes
import trustlit.data
import trustlit.finetune
import trustlit.privacy
import trustlit.safety
import trustlit.unlearning  # noqa: F401
from trustlit.callbacks import RequeueAtBatchEnd
from trustlit.unlearning.evaluation import compare_runs

PROJECT_ROOT = Path(__file__).resolve().parents[1]


class LogConfigCallback(SaveConfigCallback):
    """Writes ``config.yaml`` to the log directory and logs the whole config to every logger."""

    def save_config(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        config = yaml.safe_load(self.parser.dump(self.config, skip_none=False, skip_check=True))
        for logger in trainer.loggers:
            logger.log_hyperparams(config)


class TrustlitCLI(LightningCLI):
    def add_arguments_to_parser(self, parser: LightningArgumentParser) -> None:
        parser.add_lightning_class_args(ModelCheckpoint, "checkpoint")
        # the full config is logged by LogConfigCallback; Lightning's own logging would add the
        # module's and DataModule's hparams again, flattened into the same table
        parser.set_defaults({"checkpoint.save_last": True, "trainer.enable_autolog_hparams": False})

    def instantiate_trainer(self, **kwargs: Any) -> L.Trainer:
        trainer_config = {**self._get(self.config_init, "trainer", default={}), **kwargs}
        # the forced ModelCheckpoint would be refused with enable_checkpointing=false
        checkpointing = trainer_config.get("enable_checkpointing") is not False
        keys = self._parser(self.subcommand).callback_keys if checkpointing else []
        extra = [self._get(self.config_init, key) for key in keys]
        return self._instantiate_trainer(trainer_config, [*extra, RequeueAtBatchEnd()])

    def before_instantiate_classes(self) -> None:
        config = self.config[self.subcommand] if self.subcommand else self.config
        if config.checkpoint.dirpath is None:
            root = config.trainer.default_root_dir or "."
            config.checkpoint.dirpath = str(Path(root) / "checkpoints")


def recipe_description(path: Path) -> str:
    """The first comment line of a recipe, without the ``#``."""
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("#"):
            return line.lstrip("#").strip()
        if line.strip():
            break
    return ""


def list_recipes(directory: Path) -> list[tuple[str, str]]:
    """``(relative path, description)`` of every ``*.yaml`` recipe under ``directory``."""
    if not directory.is_dir():
        raise FileNotFoundError(f"recipe directory not found: {directory}")
    return [
        (str(path.relative_to(directory.parent)), recipe_description(path))
        for path in sorted(directory.rglob("*.yaml"))
    ]


def _print_recipes(args: list[str]) -> None:
    default = Path("recipes") if Path("recipes").is_dir() else PROJECT_ROOT / "recipes"
    directory = Path(args[0]) if args else default
    for path, description in list_recipes(directory):
        print(f"{path}  {description}")


def _compare(paths: list[str]) -> None:
    if not paths:
        raise SystemExit("usage: trustlit compare [LABEL=]EVAL.json ... (files written by UnlearningEvaluation)")
    Console().print(compare_runs(paths))


def run_cli(args: list[str] | None = None) -> TrustlitCLI:
    """Run LightningCLI on ``args`` (default ``sys.argv[1:]``) and return it (trainer, model, data)."""
    return TrustlitCLI(
        L.LightningModule,
        L.LightningDataModule,
        subclass_mode_model=True,
        subclass_mode_data=True,
        save_config_callback=LogConfigCallback,
        save_config_kwargs={"overwrite": True},
        seed_everything_default=0,
        args=args,
    )


def main(args: list[str] | None = None) -> None:
    """Entry point of ``trustlit``; ``args`` replaces ``sys.argv[1:]`` (tests call it in-process)."""
    argv = sys.argv[1:] if args is None else list(args)
    if argv and argv[0] == "recipes":
        _print_recipes(argv[1:])
    elif argv and argv[0] == "compare":
        _compare(argv[1:])
    elif argv and argv[0] == "slurm":
        from trustlit.slurm import main as slurm_main

        slurm_main(argv[1:])
    else:
        run_cli(args)


if __name__ == "__main__":
    main()
