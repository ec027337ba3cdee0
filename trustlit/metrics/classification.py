"""Classification metrics shared by the tabular models."""

from __future__ import annotations

from typing import Any

import lightning as L


def log_accuracy(module: L.LightningModule, batch: Any, stage: str) -> None:
    """Log ``{stage}/acc``, the accuracy of ``argmax module(x)`` on a batch ``(x, y, ...)``."""
    x, y = batch[0], batch[1]
    accuracy = (module(x).argmax(dim=1) == y).float().mean()
    module.log(f"{stage}/acc", accuracy, prog_bar=True, batch_size=len(y))
