"""LightningCLI for recipes: ``trustlit fit|validate|test|predict`` (dispatched by :mod:`trustlit.cli`).

Model and data are chosen by class (``class_path``) in subclass mode; a short class name
(``--model SimNPO``) resolves through :mod:`trustlit.registry`, which imports only the packages the
recipe names. The full parsed config is written next to the logs and logged to every logger as
hyperparameters.

``trainer.default_root_dir`` alone places a run: checkpoints go to ``<root>/checkpoints`` (unless
``checkpoint.dirpath`` says otherwise) and the logger's ``save_dir`` follows the root unless it is set
to something else. ``last.ckpt`` is always the final state of the fit, written atomically
(:mod:`trustlit.checkpointing`), and one run at a time owns the directory. ``--ckpt_path last`` finds
it from a new process; a resumed fit logs into the version directory of the run it continues.
"""

from __future__ import annotations

import csv
import io
import sys
import warnings
from argparse import ArgumentError
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import lightning as L
import yaml
from jsonargparse import Namespace
from lightning.pytorch.callbacks import ModelSummary, ProgressBar
from lightning.pytorch.cli import LightningArgumentParser, LightningCLI, SaveConfigCallback
from lightning.pytorch.loggers import CSVLogger
from lightning.pytorch.plugins.io import CheckpointIO

from trustlit import registry
from trustlit.callbacks import (
    QuietModelSummary,
    QuietProgressBar,
    RequeueAtBatchEnd,
    ResultsTable,
    drop_lightning_tips,
)
from trustlit.checkpointing import (
    LOG_DIR_KEY,
    AtomicCheckpointIO,
    CheckpointDirLock,
    TrustlitCheckpoint,
    check_model_class,
    read_checkpoint,
    resolve_checkpoint,
)
from trustlit.errors import ConfigError, describe_parse_error
from trustlit.hardware import warn_slow_bf16
from trustlit.resources import find_recipe


class LogConfigCallback(SaveConfigCallback):
    """Writes ``config.yaml`` to the log directory and logs the whole config to every logger."""

    def save_config(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        config = yaml.safe_load(self.parser.dump(self.config, skip_none=False, skip_check=True))
        for logger in trainer.loggers:
            logger.log_hyperparams(config)


def _logger_configs(logger: Any) -> list[Namespace]:
    """The ``class_path``/``init_args`` entries of ``trainer.logger`` (one, a list, or none)."""
    entries = logger if isinstance(logger, list) else [logger]
    return [e for e in entries if isinstance(e, Namespace) and isinstance(e.get("init_args"), Namespace)]


class TrustlitCLI(LightningCLI):
    """LightningCLI with trustlit's checkpointing, output directories and quiet defaults.

    ``argv`` is what the user typed (after recipe names are resolved) and ``configs`` the ``-c`` files,
    to tell values the user set from values a recipe merely repeats.
    """

    def __init__(self, *args: Any, argv: list[str], configs: list[Path], **kwargs: Any) -> None:
        self.argv, self.configs = argv, configs
        self.resumed_log_dir: Path | None = None
        super().__init__(*args, args=argv, parser_kwargs=_NO_EXIT, **kwargs)

    def add_arguments_to_parser(self, parser: LightningArgumentParser) -> None:
        parser.add_lightning_class_args(TrustlitCheckpoint, "checkpoint")
        # the full config is logged by LogConfigCallback; Lightning's own logging would add the
        # module's and DataModule's hparams again, flattened into the same table
        parser.set_defaults({"checkpoint.save_last": True, "trainer.enable_autolog_hparams": False})

    def _given(self, key: str) -> bool:
        """Whether ``--key`` (or a value of a parent key that mentions its last part) is on the command line."""
        parent, _, name = key.rpartition(".")
        return any(
            arg.startswith(f"--{key}") or (parent and arg.startswith(f"--{parent}") and name in arg)
            for arg in self.argv
        )

    def _recipe_root_dirs(self) -> set[str]:
        roots = set()
        for config in self.configs:
            trainer = (yaml.safe_load(config.read_text(encoding="utf-8")) or {}).get("trainer")
            if isinstance(trainer, dict):  # not a fragment's path
                roots.add(str(trainer.get("default_root_dir")))
        return roots

    def _place_outputs(self, config: Namespace) -> None:
        """Checkpoints under the root; a logger's ``save_dir`` that is unset, or only repeats a recipe's
        root, follows ``trainer.default_root_dir``."""
        root = config.trainer.default_root_dir or "."
        if config.checkpoint.dirpath is None:
            config.checkpoint.dirpath = str(Path(root) / "checkpoints")
        repeated = self._recipe_root_dirs() | {"None", "."}
        for logger in _logger_configs(config.trainer.logger):
            args = logger.init_args
            if "save_dir" in args and str(args.save_dir) in repeated and not self._given("trainer.logger.save_dir"):
                args.save_dir = root

    def _continue_log_version(self, config: Namespace, checkpoint: dict[str, Any]) -> None:
        """A resumed fit logs into the version directory it wrote before, when the logger points there."""
        saved = checkpoint.get(LOG_DIR_KEY)
        if not saved or self.subcommand != "fit":
            return
        for logger in _logger_configs(config.trainer.logger):
            args = logger.init_args
            if "version" not in args or args.version is not None or "save_dir" not in args:
                continue
            if Path(args.save_dir, args.get("name") or "").resolve() == Path(saved).parent.resolve():
                args.version = Path(saved).name
                self.resumed_log_dir = Path(saved)

    def _check_run(self, config: Namespace) -> None:
        if self.subcommand == "fit" and config.trainer.max_epochs == 0:
            raise ConfigError("trainer.max_epochs=0: fit would train nothing; give 1 or more (-1: no limit)")

    def _parse_ckpt_path(self) -> None:
        """Places the outputs, then resolves ``ckpt_path`` and checks the checkpoint before Lightning
        merges its hyperparameters into the config (which, for another class, fails obscurely)."""
        self.subcommand = self.config.get("subcommand")
        if self.subcommand is None:
            return
        config = self.config[self.subcommand]
        self._place_outputs(config)
        self._check_run(config)
        path = resolve_checkpoint(config.get("ckpt_path"), Path(config.checkpoint.dirpath), self.subcommand)
        if path is not None:
            checkpoint = read_checkpoint(path)
            check_model_class(checkpoint, config.model.class_path, path, self._start_from_hint(config, path))
            self._continue_log_version(config, checkpoint)
            config.ckpt_path = str(path)
        super()._parse_ckpt_path()

    @staticmethod
    def _start_from_hint(config: Namespace, path: Path) -> str:
        if "lm" not in (config.model.get("init_args") or {}):
            return ""
        return f"; to start this method from its weights, pass --model.init_args.lm.name_or_path={path}"

    def _extra_callbacks(self, trainer_config: dict[str, Any]) -> list[L.Callback]:
        configured = trainer_config.get("callbacks") or []
        extra: list[L.Callback] = [RequeueAtBatchEnd()]
        # quiet defaults, each replaced by a callback of the same kind in the recipe
        if trainer_config.get("enable_progress_bar") is not False and not _has(configured, ProgressBar):
            extra.append(QuietProgressBar())
        if trainer_config.get("enable_model_summary") is not False and not _has(configured, ModelSummary):
            extra.append(QuietModelSummary())
        return extra

    def instantiate_trainer(self, **kwargs: Any) -> L.Trainer:
        trainer_config = {**self._get(self.config_init, "trainer", default={}), **kwargs}
        # the forced ModelCheckpoint would be refused with enable_checkpointing=false
        checkpointing = trainer_config.get("enable_checkpointing") is not False
        keys = self._parser(self.subcommand).callback_keys if checkpointing else []
        extra = [self._get(self.config_init, key) for key in keys]
        if checkpointing:
            # first in the list, so that a refused run stops before any callback writes its logs
            dirpath = self._get(self.config_init, "checkpoint").dirpath
            trainer_config["callbacks"] = [CheckpointDirLock(dirpath), *(trainer_config.get("callbacks") or [])]
            trainer_config["plugins"] = _with_atomic_io(trainer_config.get("plugins"), trainer_config.get("strategy"))
        trainer = self._instantiate_trainer(trainer_config, [*extra, *self._extra_callbacks(trainer_config)])
        warn_slow_bf16(trainer)
        return trainer

    def _quiet_results(self) -> None:
        """One results table: a trustlit callback's (:class:`~trustlit.callbacks.ResultsTable`), when the recipe
        has one, instead of Lightning's too."""
        config = self.config_init[self.subcommand]
        if not self._given("verbose") and _has(self.trainer.callbacks, ResultsTable):
            config.verbose = False

    def before_fit(self) -> None:
        if self.resumed_log_dir is not None:
            _keep_csv_metrics(self.trainer, self.resumed_log_dir)

    def before_validate(self) -> None:
        self._quiet_results()

    def before_test(self) -> None:
        self._quiet_results()


# parse errors raise (main parser and each subcommand's), and run_cli turns them into one line
_NO_EXIT: dict[str, Any] = {"exit_on_error": False} | {
    name: {"exit_on_error": False} for name in LightningCLI.subcommands()
}


def _has(callbacks: Any, kind: type) -> bool:
    return any(isinstance(c, kind) for c in (callbacks if isinstance(callbacks, list) else [callbacks]))


def _keep_csv_metrics(trainer: L.Trainer, log_dir: Path) -> None:
    """Keeps the rows a resumed run logged before: Lightning's CSV writer deletes ``metrics.csv`` when
    it opens an existing version directory; it appends once it knows the file's columns."""
    for logger in trainer.loggers:
        metrics = Path(logger.log_dir or "", "metrics.csv") if isinstance(logger, CSVLogger) else None
        if metrics is None or metrics.parent.resolve() != log_dir.resolve() or not metrics.is_file():
            continue
        rows = metrics.read_text(encoding="utf-8")
        writer = logger.experiment  # deletes the file
        metrics.write_text(rows, encoding="utf-8")
        writer.metrics_keys = sorted(next(csv.reader(io.StringIO(rows)), []))


def _with_atomic_io(plugins: Any, strategy: Any) -> list[Any]:
    """``plugins`` plus :class:`AtomicCheckpointIO`, unless a CheckpointIO is configured already (as a
    plugin, or on a strategy object, where Lightning refuses a second one)."""
    plugins = [] if plugins is None else list(plugins) if isinstance(plugins, list) else [plugins]
    if _has(plugins, CheckpointIO) or getattr(strategy, "_checkpoint_io", None) is not None:
        return plugins
    return [*plugins, AtomicCheckpointIO()]


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


class ParseOnlyCLI(TrustlitCLI):
    """Parses and checks a command as ``trustlit fit`` would, and builds, loads and runs nothing."""

    def _parse_ckpt_path(self) -> None:
        """The checkpoint may exist only where the command will run."""

    def _set_seed(self) -> None:
        """Nothing is drawn."""

    def before_instantiate_classes(self) -> None:
        """Nothing is built."""

    def instantiate_classes(self) -> None:
        """Nothing is built."""

    def _run_subcommand(self, subcommand: str) -> None:
        """Nothing runs."""


# trustlit hands LightningCLI the argument list it rewrote (recipe names resolved), never sys.argv: Lightning's
# warning about getting both would greet every `trustlit fit` and `slurm submit`
warnings.filterwarnings("ignore", message="LightningCLI's args parameter is intended to run from within Python")


def _lightning_cli(cli_class: type[TrustlitCLI], args: list[str]) -> TrustlitCLI:
    argv, configs = _config_paths(args)
    import_named_classes(argv, configs)
    drop_lightning_tips()
    try:
        return cli_class(
            L.LightningModule,
            L.LightningDataModule,
            subclass_mode_model=True,
            subclass_mode_data=True,
            save_config_callback=LogConfigCallback,
            save_config_kwargs={"overwrite": True},
            seed_everything_default=0,
            argv=argv,
            configs=configs,
        )
    except ArgumentError as error:
        raise ConfigError(describe_parse_error(error, configs)) from error


def run_cli(args: list[str] | None = None) -> TrustlitCLI:
    """Run LightningCLI on ``args`` (default ``sys.argv[1:]``) and return it (trainer, model, data).

    A parse error raises :class:`~trustlit.errors.ConfigError` with one line naming the key (and the
    recipe file that holds it) instead of printing the usage."""
    return _lightning_cli(TrustlitCLI, list(sys.argv[1:] if args is None else args))


def parse_only(args: list[str]) -> None:
    """Parse ``args`` (``fit -c RECIPE ...``) with the parser ``run_cli`` uses, importing only the classes
    they name; a typo raises :class:`~trustlit.errors.ConfigError` (for ``trustlit slurm submit``)."""
    _lightning_cli(ParseOnlyCLI, args)
