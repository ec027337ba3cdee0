"""Callbacks shared by recipes."""

from __future__ import annotations

from collections import defaultdict

import lightning as L
from lightning.pytorch.utilities import rank_zero_only
from rich.console import Console
from rich.table import Table


def split_metrics(metrics: dict[str, float], stage: str) -> dict[str, dict[str, float]]:
    """``{split: {metric: value}}`` from logged keys of the form ``{stage}/{split}/{metric}``."""
    table: dict[str, dict[str, float]] = defaultdict(dict)
    for key, value in metrics.items():
        parts = key.split("/")
        if len(parts) == 3 and parts[0] == stage:
            table[parts[1]][parts[2]] = float(value)
    return dict(table)


class SplitMetricsTable(L.Callback):
    """Prints one row per evaluation split and one column per metric after validate/test."""

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
        Console().print(table)

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._print(trainer, "val")

    def on_test_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._print(trainer, "test")
