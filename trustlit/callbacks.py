"""Callbacks shared by recipes."""

from __future__ import annotations

import logging
import signal
import threading
from collections import defaultdict
from types import FrameType
from typing import Any

import lightning as L
from lightning.fabric.plugins.environments import SLURMEnvironment
from lightning.pytorch.callbacks import ModelSummary, RichProgressBar
from lightning.pytorch.utilities import rank_zero_only
from lightning.pytorch.utilities.model_summary.model_summary import _format_summary_table
from rich.console import Console
from rich.table import Table

# Wide enough that no metric name is cut when the output is a file (a SLURM log), not a terminal.
FILE_WIDTH = 1000


def split_metrics(metrics: dict[str, float], stage: str) -> dict[str, dict[str, float]]:
    """``{split: {metric: value}}`` from logged keys of the form ``{stage}/{split}/{metric}``."""
    table: dict[str, dict[str, float]] = defaultdict(dict)
    for key, value in metrics.items():
        parts = key.split("/")
        if len(parts) == 3 and parts[0] == stage:
            table[parts[1]][parts[2]] = float(value)
    return dict(table)


class ResultsTable:
    """Marks a callback that prints a run's results table. With one in the trainer, the CLI turns
    Lightning's own table off, and :class:`SplitMetricsTable` leaves the test table to an evaluation
    callback that prints its own (one results table per ``trustlit test``)."""


def prints_test_results(callback: object) -> bool:
    """Whether ``callback`` prints the test results itself (a :class:`ResultsTable` other than the split table)."""
    return isinstance(callback, ResultsTable) and not isinstance(callback, SplitMetricsTable)


class SplitMetricsTable(ResultsTable, L.Callback):
    """Prints one row per evaluation split and one column per metric after validate, and after test
    unless an evaluation callback prints the test results (:class:`ResultsTable`)."""

    @rank_zero_only
    def _print(self, trainer: L.Trainer, stage: str) -> None:
        rows = split_metrics(trainer.callback_metrics, stage)
        if not rows or trainer.sanity_checking:
            return
        metrics = sorted({m for row in rows.values() for m in row})
        table = Table(title=f"{stage} metrics per split")
        table.add_column("split")
        for metric in metrics:
            table.add_column(metric, justify="right")
        for split, row in rows.items():
            table.add_row(split, *(f"{row[m]:.4f}" if m in row else "-" for m in metrics))
        console = Console()
        if not console.is_terminal:
            console.width = FILE_WIDTH
        console.print(table)

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._print(trainer, "val")

    def on_test_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if not any(prints_test_results(callback) for callback in trainer.callbacks):
            self._print(trainer, "test")


class RequeueAtBatchEnd(L.Callback):
    """Defers SLURM's auto-requeue (SIGUSR1) to the end of the running training batch.

    Lightning's handler writes ``hpc_ckpt_*.ckpt`` the moment the signal arrives, in the middle
    of a batch (possibly between the parameter and optimiser-state updates of a step); the
    checkpoint then holds a half-done batch that the resumed run cannot replay exactly. Here
    the signal only raises a flag; after the batch (every rank agrees, since ranks may get the
    signal at different batches) Lightning's own handler runs: the checkpoint sits on a batch
    boundary, the loader's position equals the completed batches, and the resumed run equals an
    uninterrupted one. Outside SLURM, or with ``auto_requeue=False``, it does nothing.
    ``trustlit`` adds it to every Trainer it builds.
    """

    def __init__(self) -> None:
        self.requested = False
        self._lightning_handler = None
        self._signal = signal.SIGUSR1

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        environment = trainer._accelerator_connector.cluster_environment  # where Lightning's handler looks
        if not isinstance(environment, SLURMEnvironment) or not environment.auto_requeue:
            return
        if threading.current_thread() is not threading.main_thread():
            return  # signal handlers can only be set from the main thread
        self._lightning_handler = trainer._signal_connector._slurm_sigusr_handler_fn
        self._signal = environment.requeue_signal
        signal.signal(self._signal, self._flag)

    def _flag(self, signum: int, frame: FrameType | None) -> None:
        self.requested = True

    def on_train_batch_end(self, trainer: L.Trainer, *args: object) -> None:
        if self._lightning_handler is None:
            return
        if trainer.strategy.reduce_boolean_decision(self.requested, all=False):
            self.requested = False
            self._lightning_handler(self._signal, None)


class QuietProgressBar(RichProgressBar):
    """Rich progress bar without the logger's version number (``v_num``), which is not a metric."""

    def get_metrics(self, trainer: L.Trainer, pl_module: L.LightningModule) -> dict[str, Any]:
        items = super().get_metrics(trainer, pl_module)
        items.pop("v_num", None)
        return items


class QuietModelSummary(ModelSummary):
    """Lightning's model summary without its FLOPs column and total, which read 0 unless measured."""

    @staticmethod
    def summarize(
        summary_data: list[tuple[str, list[str]]],
        total_parameters: int,
        trainable_parameters: int,
        model_size: float,
        total_training_modes: dict[str, int],
        total_flops: int,
        **summarize_kwargs: Any,
    ) -> None:
        columns = [column for column in summary_data if column[0] != "FLOPs"]
        table = _format_summary_table(
            total_parameters, trainable_parameters, model_size, total_training_modes, total_flops, *columns
        )
        lines = [line for line in table.splitlines() if "total flops" not in line.lower()]
        logging.getLogger("lightning.pytorch.callbacks.model_summary").info("\n" + "\n".join(lines))


# Lightning's advertising (the litlogger tip), and its note that trustlit's own QuietModelSummary replaced the default
DROPPED_MESSAGES = ("Tip:", "Trainer already configured with model summary callbacks")


class _DropTips(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not any(fragment in record.getMessage() for fragment in DROPPED_MESSAGES)


def drop_lightning_tips() -> None:
    """Silences Lightning's messages in :data:`DROPPED_MESSAGES`, logged through its rank-zero logger."""
    for name in ("lightning.pytorch.utilities.rank_zero", "lightning.fabric.utilities.rank_zero"):
        log = logging.getLogger(name)
        if not any(isinstance(f, _DropTips) for f in log.filters):
            log.addFilter(_DropTips())
