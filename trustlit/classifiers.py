"""Small classifiers for tabular batches ``(x, y, index)``: the models DP recipes train."""

from __future__ import annotations

import itertools
from typing import Any, Literal

import torch
import torch.nn.functional as F
from torch import nn

from trustlit.data.tabular import check_feature_count
from trustlit.hparams import NonNegativeFloat, PositiveFloat, PositiveInt, check_arguments, plain_numbers
from trustlit.metrics import log_accuracy
from trustlit.per_sample import PerSampleLossModule


class MLPClassifier(PerSampleLossModule):
    """A ReLU multilayer perceptron trained with cross-entropy; logs ``{stage}/acc``.

    Args:
        num_features, num_classes: input width and number of classes.
        hidden_sizes: widths of the hidden layers (``[]`` is multinomial logistic regression).
        optimizer: ``sgd`` (DP-SGD's usual choice) or ``adam``.
        lr, momentum: optimiser settings (momentum for SGD only).
        weight_decay: L2 penalty (weight_decay/2)*||theta||^2 written as :meth:`regularizer`, so
            it also reaches the update under DPSGD.
    """

    def __init__(
        self,
        num_features: PositiveInt = 64,
        num_classes: PositiveInt = 10,
        hidden_sizes: list[int] | None = None,
        optimizer: Literal["sgd", "adam"] = "sgd",
        lr: PositiveFloat = 0.1,
        momentum: NonNegativeFloat = 0.0,
        weight_decay: NonNegativeFloat = 0.0,
    ) -> None:
        super().__init__()
        check_arguments(MLPClassifier.__init__, locals())
        if optimizer not in ("sgd", "adam"):
            raise ValueError(f"MLPClassifier: optimizer={optimizer!r} is invalid, expected 'sgd' or 'adam'")
        if num_classes < 2:
            raise ValueError(f"MLPClassifier: num_classes={num_classes!r} is invalid, expected an integer >= 2")
        if hidden_sizes is not None and any(width < 1 for width in hidden_sizes):
            raise ValueError(f"MLPClassifier: hidden_sizes={hidden_sizes!r} is invalid, expected widths >= 1")
        self.save_hyperparameters()
        plain_numbers(self.hparams)
        widths = [num_features, *(hidden_sizes if hidden_sizes is not None else [64])]
        layers: list[nn.Module] = []
        for width_in, width_out in itertools.pairwise(widths):
            layers += [nn.Linear(width_in, width_out), nn.ReLU()]
        self.net = nn.Sequential(*layers, nn.Linear(widths[-1], num_classes))

    def setup(self, stage: str) -> None:
        super().setup(stage)
        check_feature_count(self.hparams.num_features, self.trainer.datamodule)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def per_sample_losses(self, batch: Any) -> torch.Tensor:
        x, y = batch[0], batch[1]
        return F.cross_entropy(self(x), y, reduction="none")

    def regularizer(self) -> torch.Tensor:
        if not self.hparams.weight_decay:
            return super().regularizer()  # a constant: DPSGD then skips its gradient pass
        return 0.5 * self.hparams.weight_decay * sum(p.pow(2).sum() for p in self.parameters())

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        log_accuracy(self, batch, "val")

    def test_step(self, batch: Any, batch_idx: int) -> None:
        log_accuracy(self, batch, "test")

    def configure_optimizers(self) -> torch.optim.Optimizer:
        if self.hparams.optimizer == "adam":
            return torch.optim.Adam(self.parameters(), lr=self.hparams.lr)
        return torch.optim.SGD(self.parameters(), lr=self.hparams.lr, momentum=self.hparams.momentum)
