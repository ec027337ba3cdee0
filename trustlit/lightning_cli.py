"""LightningCLI for recipes: ``trustlit fit|validate|test|predict`` (dispatched by :mod:`trustlit.cli`).

Model and data are chosen by class (``class_path``) in subclass mode; a short class name
(``--model SimNPO``) resolves through :mod:`trustlit.registry`, which imports only the packages the
recipe names. Checkpoints always include ``last.ckpt``, in ``<trainer.default_root_dir>/checkpoints``
unless ``checkpoint.dirpath`` says otherwise, so ``--ckpt_path last`` finds them from a new process.
The full parsed config is written next to the logs and logged to every logger as hyperparameters.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import lightning as L
import yaml
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.cli import LightningArgumentParser, LightningCLI, SaveConfigCallback

from trustlit import registry
from trustlit.callbacks import RequeueAtBatchEnd
from trustlit.resources import find_recipe


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


CONFIG_FLAGS = ("-c", "--config")


def _config_paths(argv: list[str]) -> tuple[list[str], list[Path]]:
    """``argv`` with each ``-c``/``--config`` value resolved to a recipe file (a path or a listed name)."""
    resolved, configs = [], []
    index = 0
    while index < len(argv):
        arg = argv[index]
        flag, _, inline = arg.partition("=")
        if flag in CONFIG_FLAGS and (inline or index + 1 < len(argv)):
            value = inline or argv[index + 1]
            path = find_recipe(value)
            configs.append(path)
            resolved.append(f"{flag}={path}")
            index += 1 if inline else 2
            continue
        resolved.append(arg)
        index += 1
    return resolved, configs


def _strings(node: Any) -> Iterator[str]:
    if isinstance(node, str):
        yield node
    elif isinstance(node, dict):
        for value in node.values():
            yield from _strings(value)
    elif isinstance(node, list):
        for value in node:
            yield from _strings(value)


def import_named_classes(argv: list[str], configs: list[Path]) -> None:
    """Import the registered classes that ``argv`` or the config files name by their short name, so that
    jsonargparse resolves them (full ``class_path`` values it imports itself)."""
    words = {part for arg in argv for part in arg.split("=")}
    for config in configs:
        words.update(_strings(yaml.safe_load(config.read_text(encoding="utf-8"))))
    known = {entry.name for entry in registry.entries()}
    for name in sorted(words & known):
        registry.resolve(name)


def run_cli(args: list[str] | None = None) -> TrustlitCLI:
    """Run LightningCLI on ``args`` (default ``sys.argv[1:]``) and return it (trainer, model, data)."""
    argv, configs = _config_paths(list(sys.argv[1:] if args is None else args))
    import_named_classes(argv, configs)
    return TrustlitCLI(
        L.LightningModule,
        L.LightningDataModule,
        subclass_mode_model=True,
        subclass_mode_data=True,
        save_config_callback=LogConfigCallback,
        save_config_kwargs={"overwrite": True},
        seed_everything_default=0,
        args=argv,
    )
