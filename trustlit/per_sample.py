"""Modules defined by their per-sample losses: what DP-SGD (any mode), audits and attacks need.

``PerSampleLossModule`` lives outside :mod:`trustlit.privacy` so that plain models
(:mod:`trustlit.classifiers`) derive from it without importing the privacy family; the
:class:`~trustlit.privacy.DPSGD` callback hands it the step through ``dp_manual_step``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any

import lightning as L
import torch


class PerSampleLossModule(L.LightningModule, ABC):
    """A LightningModule defined by its per-sample losses, so DP-SGD can run any of its modes.

    Subclasses implement :meth:`per_sample_losses` (one unreduced loss per sample, computed
    through the module's own layers) and may override :meth:`regularizer` (data-independent).
    The training loss is mean(per_sample_losses) + regularizer(). Under :class:`~trustlit.privacy.DPSGD`
    with ghost clipping or physical batches, ``training_step`` hands the step to the callback.
    """

    dp_manual_step: Callable[[Any], torch.Tensor] | None = None

    @abstractmethod
    def per_sample_losses(self, batch: Any) -> torch.Tensor:
        """Loss of every sample of ``batch``, shape [B]."""

    def regularizer(self) -> torch.Tensor:
        """A data-independent penalty added to the loss (0 by default)."""
        return torch.zeros((), device=self.device)

    @property
    def automatic_optimization(self) -> bool:
        """False while DPSGD runs the step itself (ghost clipping, physical batches)."""
        return self.dp_manual_step is None and self._automatic_optimization

    @automatic_optimization.setter
    def automatic_optimization(self, value: bool) -> None:
        self._automatic_optimization = value

    def setup(self, stage: str) -> None:
        """Subclasses that override ``setup`` call ``super().setup(stage)``."""
        self.dp_manual_step = None  # a new fit starts automatic; DPSGD switches it in on_fit_start

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor | None:
        if self.dp_manual_step is not None:
            return self.dp_manual_step(batch)
        losses = self.per_sample_losses(batch)
        loss = mean_or_zero(losses) + self.regularizer()
        self.log("train/loss", loss, prog_bar=True, batch_size=max(1, losses.numel()))
        return loss


def mean_or_zero(losses: torch.Tensor) -> torch.Tensor:
    """The mean of per-sample losses; 0 (with a gradient path) for an empty Poisson batch."""
    return losses.sum() / max(1, losses.numel())
