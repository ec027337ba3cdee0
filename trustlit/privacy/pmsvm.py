"""PMSVM: differentially private all-in-one (Crammer–Singer) multi-class SVM, and its baselines.

Park, Choi & Lee, "Multi-Class Support Vector Machine with Differential Privacy", NeurIPS 2025
(arXiv:2510.04027; code: github.com/JinseongP/private_multiclass_svm). One-vs-rest and
one-vs-one SVMs query every sample once per binary classifier, so under composition each of
the c classifiers gets ε/c; an all-in-one SVM reads every sample once, in one optimisation.
The model is linear, scores s = W x with W ∈ R^{c×d} (``self.linear.weight``, ``PMSVM.W``),
and predicts argmax_k s_k. ``mechanism`` selects how W is made private:

- ``weight`` (**PMSVM-WP**, weight perturbation): W = argmin_W F(W) + N(0, σ² I) with
  F(W) = λ/2 ||W||_F² + (1/n) Σ_i max(0, 1 + max_{k≠y_i} w_k·x_i − w_{y_i}·x_i), solved
  exactly, Δ = 2√2/(nλ) (derivation and comparison with the paper's code in
  :mod:`trustlit.privacy.svm`) and σ the analytic Gaussian calibration for (ε, δ)
  (:func:`~trustlit.privacy.mechanisms.analytic_gaussian_sigma`, Balle & Wang 2018).
- ``gradient`` (**PMSVM-GP**, SGD) and ``adaptive_gradient`` (**PMSVM-AGP**, Adam): minimise
  mean_i ℓ_h(W x_i, y_i) + μ ||W||_F² with the smoothed hinge
  ℓ_h(s, y) = h · log Σ_k exp((m_k + s_k − s_y)/h) (m_k = 1 for k ≠ y, m_y = 0;
  :func:`~trustlit.privacy.svm.smoothed_crammer_singer_loss`). The privacy comes from the
  :class:`~trustlit.privacy.dpsgd.DPSGD` callback (per-sample clipping, Gaussian noise,
  accounting), which also holds the budget: its ``target_epsilon`` / ``target_delta``, not this
  module's ``epsilon`` / ``delta``. **Without the callback these train non-privately** (a
  warning says so). μ ||W||² reads no data and is added after clipping and noise.
- ``ovr_classic`` / ``ovr_analytic``: the one-vs-rest baseline, c binary hinge SVMs each
  released with Δ = 2/(nλ) at (ε/c, δ/c), with the classic (σ = Δ sqrt(2 ln(1.25 c/δ)) c/ε)
  or the analytic calibration.
- ``non_private``: the exact Crammer–Singer solution, no noise (the upper baseline).

λ and the weight perturbation: with every hinge active (1 + max_{k≠y_i} w_k·x_i − w_{y_i}·x_i > 0 for
all i), F(W) = λ/2 ||W||² + 1 + g(W) with g(W) = (1/n) Σ_i (max_{k≠y_i} w_k·x_i − w_{y_i}·x_i) positively
homogeneous, so the minimiser is W(λ) = V*/λ, V* = argmin_V ½||V||² + g(V), i.e.
λ n W = Σ_i (e_{y_i} − e_{k_i}) x_iᵀ with k_i = argmax_{k≠y_i} w_k·x_i (a convex combination over tied k). This holds
for every λ > λ* = max_i (v*_{y_i} − max_{k≠y_i} v*_k)·x_i (λ* <= 2 for ||x|| <= 1; 0.007 to 0.37 on the
privacy benchmark's unit-norm datasets). There W(λ) + N(0, σ²) with σ ∝ Δ ∝ 1/λ is (V* + N(0, (λσ)²))/λ, and
argmax is scale-free: PMSVM-WP's accuracy does not depend on λ above λ*, so searching λ there is moot.

The exact mechanisms collect one epoch of batches ``(x, y, index)`` (rows with ||x|| <= 1), solve
on all of them at the last batch of the first epoch and release W once (a ``released`` buffer);
the gradient mechanisms train under DPSGD. Notes (release once, what is public, noise seeds,
caveats, the paper's code): docs/methods/pmsvm.md
"""

from __future__ import annotations

import math
from typing import Any, Literal

import numpy as np
import torch
from lightning.pytorch.utilities import rank_zero_warn
from torch import nn

from trustlit.data.tabular import check_feature_count
from trustlit.hparams import (
    NonNegativeFloat,
    OpenUnitInterval,
    PositiveFloat,
    PositiveInt,
    check_arguments,
    plain_numbers,
)
from trustlit.metrics import log_accuracy
from trustlit.per_sample import PerSampleLossModule
from trustlit.privacy.dpsgd import DPSGD
from trustlit.privacy.svm import (
    check_row_norms,
    crammer_singer_sensitivity,
    fit_crammer_singer,
    release_crammer_singer,
    release_one_vs_rest,
    smoothed_crammer_singer_loss,
)

Mechanism = Literal["weight", "gradient", "adaptive_gradient", "ovr_classic", "ovr_analytic", "non_private"]
EXACT_MECHANISMS = ("weight", "ovr_classic", "ovr_analytic", "non_private")
GRADIENT_MECHANISMS = ("gradient", "adaptive_gradient")


class PMSVM(PerSampleLossModule):
    """A private linear multi-class SVM; see the module docstring for the mechanisms and formulas.

    Args:
        mechanism: ``weight`` (PMSVM-WP), ``gradient`` (PMSVM-GP), ``adaptive_gradient``
            (PMSVM-AGP), ``ovr_classic``, ``ovr_analytic`` or ``non_private``.
        num_features, num_classes: d and c (public; 64 and 10 fit ``digits``).
        epsilon, delta: the (ε, δ) budget of the output-perturbation mechanisms (``weight``,
            ``ovr_*``); ε > 0, δ in (0, 1). The gradient mechanisms take theirs from DPSGD.
        lam: λ > 0 of the exact mechanisms' objective. Not from the paper: its released code
            passes LinearSVC's C = 1 (λ = 1/n); larger λ means less noise (Δ ∝ 1/λ) and more bias,
            until λ > λ* where every margin is violated and W, σ both scale as 1/λ (module docstring).
        mu: μ >= 0, the weight of μ ||W||_F² in the gradient mechanisms' loss.
        smoothing: h > 0 of the smoothed hinge (h = 1, the softmax-like smoothing of the
            authors' gradient code; smaller h is closer to the hinge).
        lr: learning rate of SGD (``gradient``) or Adam (``adaptive_gradient``).
        seed: seed of the released noise (None: fresh entropy; a known seed lets anyone subtract the noise).
    """

    def __init__(
        self,
        mechanism: Mechanism = "weight",
        num_features: PositiveInt = 64,
        num_classes: PositiveInt = 10,
        epsilon: PositiveFloat = 1.0,
        delta: OpenUnitInterval = 1e-5,
        lam: PositiveFloat = 0.01,
        mu: NonNegativeFloat = 1e-3,
        smoothing: PositiveFloat = 1.0,
        lr: PositiveFloat = 0.1,
        seed: int | None = None,
    ) -> None:
        super().__init__()
        check_arguments(PMSVM.__init__, locals())
        allowed = EXACT_MECHANISMS + GRADIENT_MECHANISMS
        if mechanism not in allowed:
            raise ValueError(f"PMSVM: mechanism={mechanism!r} is invalid, expected one of {allowed}")
        if num_classes < 2:
            raise ValueError(f"PMSVM: num_classes={num_classes!r} is invalid, expected an integer >= 2")
        for key, value in {"epsilon": epsilon, "lam": lam, "mu": mu, "smoothing": smoothing, "lr": lr}.items():
            if not math.isfinite(value):
                raise ValueError(f"PMSVM: {key}={value!r} is invalid, expected a finite number")
        self.save_hyperparameters()
        plain_numbers(self.hparams)
        self.linear = nn.Linear(num_features, num_classes, bias=False)
        nn.init.zeros_(self.linear.weight)
        self.register_buffer("released", torch.zeros((), dtype=torch.bool))
        self.automatic_optimization = mechanism in GRADIENT_MECHANISMS
        self._collected: list[tuple[torch.Tensor, torch.Tensor]] = []
        self._release_log: dict[str, float] | None = None

    @property
    def exact(self) -> bool:
        """Whether the mechanism solves exactly and releases once (``weight``, ``ovr_*``, ``non_private``)."""
        return self.hparams.mechanism in EXACT_MECHANISMS

    @property
    def W(self) -> nn.Parameter:
        """The weights W ∈ R^{c×d} (``self.linear.weight``); for exact mechanisms the released ones."""
        return self.linear.weight

    def _check_width(self, x: torch.Tensor) -> None:
        if x.ndim != 2 or x.shape[1] != self.hparams.num_features:
            raise ValueError(
                f"PMSVM(num_features={self.hparams.num_features}) got features of shape {tuple(x.shape)}: "
                "set num_features to the data's width"
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Scores x Wᵀ, shape [B, c]."""
        self._check_width(x)
        return self.linear(x)

    def per_sample_losses(self, batch: Any) -> torch.Tensor:
        x, y = batch[0], batch[1]
        return smoothed_crammer_singer_loss(self(x), y, self.hparams.smoothing)

    def regularizer(self) -> torch.Tensor:
        return self.hparams.mu * self.linear.weight.pow(2).sum()

    # -- set-up ----------------------------------------------------------------------------

    def setup(self, stage: str) -> None:
        super().setup(stage)
        check_feature_count(self.hparams.num_features, self.trainer.datamodule)
        if stage != "fit":
            return
        has_dpsgd = any(isinstance(callback, DPSGD) for callback in self.trainer.callbacks)
        mechanism = self.hparams.mechanism
        if self.exact and has_dpsgd:
            raise ValueError(
                f"PMSVM(mechanism='{mechanism}') is private by output perturbation and solves exactly: remove the "
                "DPSGD callback (it is for mechanism='gradient' or 'adaptive_gradient')"
            )
        if self.exact and self.trainer.world_size > 1:
            raise ValueError(
                f"PMSVM(mechanism='{mechanism}') solves on all training data in one process: run with devices=1 "
                f"(world size is {self.trainer.world_size})"
            )
        if not self.exact and not has_dpsgd:
            rank_zero_warn(
                f"PMSVM(mechanism='{mechanism}') is training without the DPSGD callback: the model is NOT private"
            )

    def configure_optimizers(self) -> torch.optim.Optimizer:
        if self.hparams.mechanism == "adaptive_gradient":
            return torch.optim.Adam(self.parameters(), lr=self.hparams.lr)
        if self.hparams.mechanism == "gradient":
            return torch.optim.SGD(self.parameters(), lr=self.hparams.lr)
        # exact mechanisms: a no-op optimiser (no gradient is ever computed, lr 0), stepped once per
        # collected batch so that global_step advances and checkpoints are saved
        return torch.optim.SGD(self.parameters(), lr=0.0)

    def on_train_start(self) -> None:
        if self.exact and bool(self.released):
            self.trainer.should_stop = True  # released already (resumed run or second fit): never again

    # -- exact mechanisms: collect, solve once, release -------------------------------------

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor | None:
        if not self.exact:
            return super().training_step(batch, batch_idx)
        if bool(self.released):
            return None
        x, y = batch[0].detach(), batch[1].detach()
        self._check_width(x)
        if len(y) and (int(y.min()) < 0 or int(y.max()) >= self.hparams.num_classes):
            raise ValueError(
                f"PMSVM(num_classes={self.hparams.num_classes}) got labels in [{int(y.min())}, {int(y.max())}]: "
                "set num_classes to the number of classes"
            )
        check_row_norms(x)
        self._collected.append((x.cpu(), y.cpu()))
        self.optimizers().step()
        if batch_idx + 1 == self.trainer.num_training_batches:
            self._release()
        return None

    def on_train_epoch_end(self) -> None:
        if self.exact and not bool(self.released) and self._collected:
            self._release()  # an iterable loader of unknown length: release at the epoch's end
        if self._release_log is not None:
            for key, value in self._release_log.items():
                self.log(key, value)
            self._release_log = None

    def _release(self) -> None:
        X = torch.cat([x for x, _ in self._collected]).double().numpy()
        y = torch.cat([y for _, y in self._collected]).numpy()
        self._collected = []
        hp = self.hparams
        rng = np.random.default_rng(hp.seed)
        if hp.mechanism == "weight":
            release = release_crammer_singer(X, y, hp.num_classes, hp.lam, hp.epsilon, hp.delta, rng)
        elif hp.mechanism in ("ovr_classic", "ovr_analytic"):
            calibration = "classic" if hp.mechanism == "ovr_classic" else "analytic"
            release = release_one_vs_rest(X, y, hp.num_classes, hp.lam, hp.epsilon, hp.delta, calibration, rng)
        else:
            release = None
        if release is None:
            weights = fit_crammer_singer(X, y, hp.num_classes, hp.lam)
            self._release_log = {"dp/sigma": 0.0, "dp/sensitivity": crammer_singer_sensitivity(len(y), hp.lam)}
        else:
            weights = release.weights
            self._release_log = {
                "dp/epsilon": release.epsilon,
                "dp/delta": release.delta,
                "dp/sigma": release.sigma,
                "dp/sensitivity": release.sensitivity,
            }
        with torch.no_grad():
            self.linear.weight.copy_(torch.as_tensor(weights, dtype=self.linear.weight.dtype))
        self.released.fill_(True)
        self.trainer.should_stop = True

    # -- evaluation ------------------------------------------------------------------------

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        log_accuracy(self, batch, "val")

    def test_step(self, batch: Any, batch_idx: int) -> None:
        log_accuracy(self, batch, "test")
