"""Matching-pursuit SAE, MP-SAE (Costa, Fel, Lubana, Tolooshams, Ba, "From Flat to Hierarchical:
Extracting Sparse Representations with Matching Pursuit", NeurIPS 2025, arXiv 2506.03093).

The encoder is matching pursuit unrolled over the (tied) dictionary D [n_latents, d_in], unit-norm atoms d_j:

r_0 = x - b_pre;  for t = 1..k:  c = D r_{t-1};  j = argmax_j c_j;  z_j += c_j;  r_t = r_{t-1} - c_j d_j;
x_hat = z D + b_pre  (= x - r_k).

Each step removes from the residual its projection on the chosen atom, so ||r_t|| never increases and
the atoms chosen later are conditionally orthogonal to the part already explained: the structure of
hierarchical features (a child direction given its parent), which linear-threshold encoders miss.
Adaptive sparsity at inference: ``encode(x, residual_threshold=tau)`` stops each input once
||r_t||^2 / ||r_0||^2 < tau, so the number of atoms is chosen per input.

Loss: mean_b ||x_b - x_hat_b||^2 + beta * d_in * L_revive, the dead-atom term of the reference code
(overcomplete's MP-SAE recipe, :func:`~trustlit.interpret.sae.metrics.revive_loss`):
L_revive = -mean_{b, j dead} <r_b, d_j> over the atoms whose largest code in the batch is < 0.01,
applied when more than 10 are dead; beta = 0.01 against the reference's per-element MSE, hence the d_in
here, where the reconstruction term sums over the d_in elements.

Notes: docs/methods/matching_pursuit_sae.md
"""

from __future__ import annotations

from typing import Any

import torch

from trustlit.hparams import NonNegativeFloat, PositiveInt, check_arguments
from trustlit.interpret.sae.base import SAEOutput, SparseAutoencoder
from trustlit.interpret.sae.metrics import MatchingPursuit, check_k, matching_pursuit, revive_loss


class MatchingPursuitSAE(SparseAutoencoder):
    """MP-SAE (see the module docstring).

    Args:
        d_in: width of the activations.
        n_latents: number of atoms.
        k: matching-pursuit steps in training (and by default at inference).
        revive_coefficient: beta of the revive term (0 turns it off).
        gram: update the correlations through the Gram matrix D D^T (``None``: when cheaper, see
            :func:`~trustlit.interpret.sae.metrics.matching_pursuit`).
        Other arguments: see :class:`~trustlit.interpret.sae.base.SparseAutoencoder`.
    """

    def __init__(
        self,
        d_in: PositiveInt,
        n_latents: PositiveInt,
        k: PositiveInt = 32,
        revive_coefficient: NonNegativeFloat = 1e-2,
        gram: bool | None = None,
        **kwargs: Any,
    ) -> None:
        check_arguments(MatchingPursuitSAE.__init__, locals())
        check_k(int(k), int(n_latents), type(self).__name__)
        super().__init__(d_in, n_latents, **kwargs)
        self.k = int(k)
        self.gram = gram

    def pursue(self, x: torch.Tensor, k: int | None = None, residual_threshold: float | None = None) -> MatchingPursuit:
        """The whole pursuit on x [B, d_in]: codes, residual, chosen atoms, coefficients, residual norms.

        ``k`` defaults to the training k without ``residual_threshold``; with it, to min(d_in, n_latents),
        so that the threshold decides.
        """
        if residual_threshold is not None and not 0 < residual_threshold <= 1:
            raise ValueError(
                f"{type(self).__name__}: residual_threshold={residual_threshold!r}, expected a number in (0, 1]"
            )
        if k is None:
            k = self.k if residual_threshold is None else min(self.d_in, self.n_latents)
        check_k(k, self.n_latents, type(self).__name__)
        return matching_pursuit(x - self.b_pre, self.W_dec, k, residual_threshold, self.gram)

    def encode(self, x: torch.Tensor, k: int | None = None, residual_threshold: float | None = None) -> torch.Tensor:
        """Codes z [B, n_latents] after k steps, or fewer per input with ``residual_threshold`` (see :meth:`pursue`)."""
        return self.pursue(x, k, residual_threshold).codes

    def training_forward(self, x: torch.Tensor) -> SAEOutput:
        result = self.pursue(x)
        x_hat = x - result.residual  # = z D + b_pre, without the dense [B, n_latents] x [n_latents, d_in] product
        terms = {}
        if self.hparams.revive_coefficient > 0:
            # x d_in: the reference weighs the term against a per-element MSE, ours sums over the d_in elements
            revive = revive_loss(result.residual, self.W_dec, result.codes)
            terms["revive"] = self.hparams.revive_coefficient * self.d_in * revive
        return SAEOutput(result.codes, x_hat, terms)
