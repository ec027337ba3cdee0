"""The TopER graph classifier (batch norm + one-hidden-layer MLP on the TopER vector) and nested cross-validation.

Tola, Taiwo, Akcora, Coskunuzer, "TopER: Topological Embeddings in Graph Representation Learning" (NeurIPS 2025,
arXiv 2410.01778), section 4.1 and appendix A.7: batch normalisation of the input features, one hidden layer,
log-softmax output and negative log-likelihood, Adam, 500 epochs; searched over the learning rate {0.01, 0.001},
hidden width {16, 64, 128}, L2 coefficient {1e-3, 1e-4}, activation {ReLU, GELU, ELU}, batch norm of the hidden
layer or not, dropout {0, 0.5} (:data:`PAPER_GRID`), reported as the mean accuracy over 10 stratified folds.

:func:`nested_cross_validation` is the protocol every classifier of ``benchmarks/graphs.py`` shares. For each outer
fold F_k (test) with training part T_k = all \\ F_k:

- nested: the configuration θ*_k = argmax_θ (1/J) Σ_j acc(θ; T_k \\ F_kj -> F_kj) over J inner stratified folds
  F_kj of T_k only; the estimate is (1/K) Σ_k acc(θ*_k; T_k -> F_k);
- test-fold selection, the released code's protocol (``classification_codes/accmlp.py`` ``param_selection`` is
  called with the outer test fold as its validation set and returns the best test accuracy over its grid):
  (1/K) Σ_k max_θ acc(θ; T_k -> F_k), an optimistic estimate: the max of many noisy test accuracies.

Both come from one run: acc(θ; T_k -> F_k) is computed for every θ (the released protocol needs them all) and the
nested estimate reads the entry of θ*_k, which was chosen before and without any of them.

Notes: docs/methods/toper_classifier.md
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import lightning as L
import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from trustlit.data.graphs import stratified_folds
from trustlit.data.tabular import check_feature_count
from trustlit.hparams import NonNegativeFloat, PositiveFloat, PositiveInt, check_arguments, plain_numbers

ACTIVATIONS: dict[str, type[nn.Module]] = {"relu": nn.ReLU, "gelu": nn.GELU, "elu": nn.ELU}
# Appendix A.7's search space: 2 x 3 x 2 x 3 x 2 x 2 = 144 configurations.
PAPER_GRID: dict[str, list[Any]] = {
    "lr": [0.01, 0.001],
    "hidden": [16, 64, 128],
    "weight_decay": [1e-3, 1e-4],
    "activation": ["relu", "gelu", "elu"],
    "hidden_batch_norm": [True, False],
    "dropout": [0.0, 0.5],
}
FitPredict = Callable[[Sequence[tuple[np.ndarray, np.ndarray]], Mapping[str, Any]], list[np.ndarray]]


class TopERClassifier(L.LightningModule):
    """The paper's MLP on TopER vectors (module docstring): x -> BatchNorm(x) -> Linear(D, hidden) -> activation
    [-> BatchNorm(hidden)] -> Dropout -> Linear(hidden, C) -> log-softmax, trained with the NLL loss and Adam.

    Batches are ``(x [B, D], y [B])``; logs ``train/loss``, ``{train,val,test}/acc``.

    Args:
        num_features, num_classes: the TopER vector's width D and the number of classes C.
        hidden: hidden width (the paper's grid: 16, 64, 128).
        activation: ``relu``, ``gelu`` or ``elu``.
        hidden_batch_norm: batch norm after the hidden layer (the paper searches both).
        dropout: dropout of the hidden layer (0 or 0.5 in the paper).
        input_batch_norm: batch norm of the input features (section 4.1: always on).
        lr: Adam's learning rate (0.01 or 0.001).
        weight_decay: the L2 coefficient, as Adam's ``weight_decay`` (1e-3 or 1e-4).

    Notes: docs/methods/toper_classifier.md
    """

    def __init__(
        self,
        num_features: PositiveInt = 4,
        num_classes: PositiveInt = 2,
        hidden: PositiveInt = 64,
        activation: Literal["relu", "gelu", "elu"] = "relu",
        hidden_batch_norm: bool = False,
        dropout: NonNegativeFloat = 0.0,
        input_batch_norm: bool = True,
        lr: PositiveFloat = 0.01,
        weight_decay: NonNegativeFloat = 1e-3,
    ) -> None:
        super().__init__()
        check_arguments(TopERClassifier.__init__, locals())
        if activation not in ACTIVATIONS:
            raise ValueError(f"TopERClassifier: activation={activation!r} is invalid, expected relu, gelu or elu")
        if num_classes < 2:
            raise ValueError(f"TopERClassifier: num_classes={num_classes!r} is invalid, expected an integer >= 2")
        if dropout >= 1:
            raise ValueError(f"TopERClassifier: dropout={dropout!r} is invalid, expected a number in [0, 1)")
        self.save_hyperparameters()
        plain_numbers(self.hparams)
        layers: list[nn.Module] = [nn.BatchNorm1d(num_features)] if input_batch_norm else []
        layers += [nn.Linear(num_features, hidden), ACTIVATIONS[activation]()]
        layers += [nn.BatchNorm1d(hidden)] if hidden_batch_norm else []
        layers += [nn.Dropout(dropout), nn.Linear(hidden, num_classes)]
        self.net = nn.Sequential(*layers)

    def setup(self, stage: str) -> None:
        check_feature_count(self.hparams.num_features, self.trainer.datamodule)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Log-probabilities [B, C]."""
        return F.log_softmax(self.net(x), dim=-1)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch[0], batch[1]
        log_probs = self(x)
        loss = F.nll_loss(log_probs, y)
        self.log("train/loss", loss)
        self.log("train/acc", (log_probs.argmax(-1) == y).float().mean())
        return loss

    def _accuracy(self, batch: Any, stage: str) -> None:
        x, y = batch[0], batch[1]
        self.log(f"{stage}/acc", (self(x).argmax(-1) == y).float().mean())

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        self._accuracy(batch, "val")

    def test_step(self, batch: Any, batch_idx: int) -> None:
        self._accuracy(batch, "test")

    def predict_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        return self(batch[0]).argmax(-1)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.Adam(self.parameters(), lr=self.hparams.lr, weight_decay=self.hparams.weight_decay)

    def on_fit_end(self) -> None:
        """The 2-D TopER scatter of every graph of a ``GraphDataModule`` (its first (pivot, growth) pair), coloured by
        class, as ``<default_root_dir>/toper_scatter.png`` and on W&B when a WandbLogger is attached."""
        datamodule = getattr(self.trainer, "datamodule", None)
        if not self.trainer.is_global_zero or getattr(datamodule, "features", np.zeros((0, 0))).shape[0] == 0:
            return
        from trustlit.figures import log_to_wandb

        path = toper_scatter(
            datamodule.features,
            datamodule.labels,
            datamodule.class_names,
            Path(self.trainer.default_root_dir) / "toper_scatter.png",
            label=f"{datamodule.filtrations[0]}, {datamodule.levels[0]}level",
        )
        log_to_wandb(self.trainer, "toper", images=[path])


def toper_scatter(
    features: np.ndarray, labels: np.ndarray, class_names: Sequence[str], path: Path, *, label: str, title: str = ""
) -> Path:
    """Growth b against pivot a (columns 1 and 0 of TopER vectors: the first filtration and level), one colour per
    class, written to ``path`` (PNG)."""
    from trustlit.figures import new_figure, save_png

    figure, axes = new_figure(figsize=(6, 4.5))
    for index, name in enumerate(class_names):
        chosen = labels == index
        axes.scatter(features[chosen, 1], features[chosen, 0], s=10, alpha=0.7, label=name)
    axes.set_xlabel(f"growth b ({label})")
    axes.set_ylabel(f"pivot a ({label})")
    axes.legend(fontsize=8)
    if title:
        axes.set_title(title)
    return save_png(figure, path)


def expand_grid(choices: Mapping[str, Sequence[Any]]) -> list[dict[str, Any]]:
    """Every combination of ``choices`` (name -> values), in ``itertools.product`` order."""
    names = list(choices)
    return [dict(zip(names, values, strict=True)) for values in itertools.product(*(choices[n] for n in names))]


def _member_tensors(model: TopERClassifier) -> dict[str, torch.Tensor]:
    """``model``'s parameters and batch-norm buffers by role: ``in``/``hid`` batch norms, ``l1``/``l2`` linears."""
    layers = list(model.net)
    roles: dict[str, torch.Tensor] = {}
    norms = [layer for layer in layers if isinstance(layer, nn.BatchNorm1d)]
    linears = [layer for layer in layers if isinstance(layer, nn.Linear)]
    names = (["in"] if model.hparams.input_batch_norm else []) + (["hid"] if model.hparams.hidden_batch_norm else [])
    for name, norm in zip(names, norms, strict=True):
        roles |= {f"{name}.weight": norm.weight, f"{name}.bias": norm.bias}
        roles |= {f"{name}.running_mean": norm.running_mean, f"{name}.running_var": norm.running_var}
    for name, linear in zip(("l1", "l2"), linears, strict=True):
        roles |= {f"{name}.weight": linear.weight, f"{name}.bias": linear.bias}
    return roles


class StackedTopERClassifier(nn.Module):
    """M copies of one :class:`TopERClassifier` configuration trained together, member m on the rows ``mask[m]`` of
    one full batch: the same layers, loss (mean NLL over the member's rows), batch-norm statistics (over the
    member's rows; running estimates with momentum 0.1 and the unbiased variance, as ``nn.BatchNorm1d``) and Adam
    (elementwise, so stacking changes nothing). It exists for speed: nested cross-validation trains one
    configuration on every split of every fold at once instead of one Trainer run per split.

    Args:
        members: the initial models (their weights are copied, stacked on a new first axis).
    """

    def __init__(self, members: Sequence[TopERClassifier]) -> None:
        super().__init__()
        self.hparams = dict(members[0].hparams)
        tensors = [_member_tensors(m) for m in members]
        for name in tensors[0]:
            stacked = torch.stack([t[name].detach().clone() for t in tensors])
            if "running" in name:
                self.register_buffer(name.replace(".", "_"), stacked)
            else:
                self.register_parameter(name.replace(".", "_"), nn.Parameter(stacked))
        self.activation = ACTIVATIONS[self.hparams["activation"]]()
        self.dropout = nn.Dropout(self.hparams["dropout"])

    def _norm(self, name: str, h: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        """Batch norm of h [M, N, W]: over each member's rows of ``mask`` [M, N] in training, running stats else."""
        mean, var = getattr(self, f"{name}_running_mean"), getattr(self, f"{name}_running_var")
        if self.training:
            weights = mask.unsqueeze(-1).to(h.dtype)
            count = weights.sum(1)
            batch_mean = (weights * h).sum(1) / count
            batch_var = (weights * (h - batch_mean.unsqueeze(1)) ** 2).sum(1) / count
            with torch.no_grad():
                mean.mul_(0.9).add_(0.1 * batch_mean)
                var.mul_(0.9).add_(0.1 * batch_var * count / (count - 1))
            mean, var = batch_mean, batch_var
        normed = (h - mean.unsqueeze(1)) / torch.sqrt(var.unsqueeze(1) + 1e-5)
        return normed * getattr(self, f"{name}_weight").unsqueeze(1) + getattr(self, f"{name}_bias").unsqueeze(1)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        """Log-probabilities [M, N, C] of every member on x [N, D] (``mask`` [M, N]: the rows each trains on)."""
        h = x.unsqueeze(0).expand(self.l1_weight.shape[0], -1, -1)
        if self.hparams["input_batch_norm"]:
            h = self._norm("in", h, mask)
        h = self.activation(torch.baddbmm(self.l1_bias.unsqueeze(1), h, self.l1_weight.transpose(1, 2)))
        if self.hparams["hidden_batch_norm"]:
            h = self._norm("hid", h, mask)
        logits = torch.baddbmm(self.l2_bias.unsqueeze(1), self.dropout(h), self.l2_weight.transpose(1, 2))
        return F.log_softmax(logits, dim=-1)

    def loss(self, x: torch.Tensor, y: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """Σ_m mean NLL of member m over its rows: each member's gradient is its own model's."""
        nll = -self(x, mask).gather(-1, y.expand(mask.shape[0], -1).unsqueeze(-1)).squeeze(-1)
        return ((nll * mask).sum(1) / mask.sum(1)).sum()

    def fit(self, x: torch.Tensor, y: torch.Tensor, mask: torch.Tensor, epochs: int) -> StackedTopERClassifier:
        """Full-batch Adam for ``epochs`` steps (the members' lr and weight decay)."""
        hp = self.hparams
        optimizer = torch.optim.Adam(self.parameters(), lr=hp["lr"], weight_decay=hp["weight_decay"])
        self.train()
        for _ in range(epochs):
            optimizer.zero_grad()
            self.loss(x, y, mask).backward()
            optimizer.step()
        return self.eval()


def mlp_fit_predict(features: np.ndarray, labels: np.ndarray, *, max_epochs: int = 500, seed: int = 0) -> FitPredict:
    """A ``fit_predict(splits, params)`` for :func:`nested_cross_validation`: for one configuration ``params``
    (:class:`TopERClassifier`'s arguments), one model per ``(train, test)`` split, initialised as
    ``TopERClassifier`` seeded by ``seed`` + split number, trained full-batch for ``max_epochs`` epochs together
    (:class:`StackedTopERClassifier`); returns each model's predicted classes on its ``test`` rows."""
    x = torch.as_tensor(np.asarray(features), dtype=torch.float32)
    y = torch.as_tensor(np.asarray(labels), dtype=torch.long)
    num_classes = int(y.max()) + 1

    def fit_predict(splits: Sequence[tuple[np.ndarray, np.ndarray]], params: Mapping[str, Any]) -> list[np.ndarray]:
        members = []
        for number in range(len(splits)):
            torch.manual_seed(seed + number)
            members.append(TopERClassifier(num_features=x.shape[1], num_classes=num_classes, **params))
        mask = torch.zeros(len(splits), len(y))
        for m, (train, _) in enumerate(splits):
            mask[m, torch.as_tensor(train)] = 1.0
        stacked = StackedTopERClassifier(members).fit(x, y, mask, max_epochs)
        with torch.no_grad():
            predicted = stacked(x).argmax(-1).numpy()
        return [predicted[m, test] for m, (_, test) in enumerate(splits)]

    return fit_predict


@dataclass
class CrossValidation:
    """What :func:`nested_cross_validation` measured: per outer fold k and configuration θ, ``inner[k, θ]`` (mean
    inner-fold accuracy on the training part) and ``outer[k, θ]`` (trained on T_k, accuracy on F_k)."""

    grid: list[dict[str, Any]]
    inner: np.ndarray
    outer: np.ndarray
    chosen: list[int]  # θ*_k, argmax of inner[k] (the first on ties)

    @property
    def nested(self) -> np.ndarray:
        """Accuracy per outer fold of the configuration the inner folds chose."""
        return self.outer[np.arange(len(self.chosen)), self.chosen]

    @property
    def test_fold(self) -> np.ndarray:
        """Accuracy per outer fold of the best configuration on that test fold (the released code's protocol)."""
        return self.outer.max(axis=1)

    def summary(self) -> dict[str, Any]:
        """JSON-ready: per-fold accuracies of both protocols, their means, and the chosen configurations."""
        return {
            "nested": self.nested.tolist(),
            "test_fold": self.test_fold.tolist(),
            "nested_mean": float(self.nested.mean()),
            "test_fold_mean": float(self.test_fold.mean()),
            "chosen": [self.grid[c] for c in self.chosen],
        }


def accuracy(predicted: np.ndarray, labels: np.ndarray) -> float:
    return float(np.mean(np.asarray(predicted) == np.asarray(labels)))


def nested_cross_validation(
    labels: np.ndarray,
    fit_predict: FitPredict,
    grid: Sequence[Mapping[str, Any]],
    *,
    outer_folds: int = 10,
    inner_folds: int = 5,
    seed: int = 0,
) -> CrossValidation:
    """Nested and test-fold-selected cross-validation of ``fit_predict`` over ``grid`` (module docstring).

    ``fit_predict(splits, params)`` trains one model per ``(train, test)`` pair of dataset indices with the
    configuration ``params`` and returns the predicted classes of each pair's ``test`` indices; it sees indices only,
    so one protocol serves feature vectors and precomputed kernels, and it gets every split of a configuration at
    once, so a method may train them together. The outer folds are :func:`~trustlit.data.graphs.stratified_folds`
    of ``labels`` with ``seed``: every method run with the same labels and seed gets the same folds. θ*_k is read
    from the inner splits alone, which never hold an index of F_k.
    """
    labels = np.asarray(labels)
    grid = [dict(params) for params in grid]
    if not grid:
        raise ValueError("grid=[] is invalid, expected at least one configuration")
    everything = np.arange(labels.size)
    outer_splits, inner_splits = [], []
    for k, test in enumerate(stratified_folds(labels, outer_folds, seed)):
        train = np.setdiff1d(everything, test)
        outer_splits.append((train, test))
        for held in stratified_folds(labels[train], inner_folds, seed + 1 + k):
            inner_splits.append((np.setdiff1d(train, train[held]), train[held]))
    inner = np.zeros((outer_folds, len(grid)))
    outer = np.zeros((outer_folds, len(grid)))
    for c, params in enumerate(grid):
        splits = inner_splits + outer_splits
        scores = [accuracy(p, labels[t]) for p, (_, t) in zip(fit_predict(splits, params), splits, strict=True)]
        inner[:, c] = np.reshape(scores[: len(inner_splits)], (outer_folds, inner_folds)).mean(axis=1)
        outer[:, c] = scores[len(inner_splits) :]
    return CrossValidation(grid, inner, outer, [int(np.argmax(row)) for row in inner])
