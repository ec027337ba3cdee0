"""TopK SAE (Gao, la Tour, Tillman, Goh, Troll, Radford, Sutskever, Leike, Wu, "Scaling and evaluating
sparse autoencoders", ICLR 2025, arXiv 2406.04093).

z = ReLU(TopK_k(h)), h = (x - b_pre) W_enc + b_enc: the k largest pre-activations of each sample are
kept, the rest set to 0, so every sample has at most k (in practice exactly k) active latents.
Loss: mean_b ||x_b - x_hat_b||^2 + alpha * L_aux, with AuxK
(:func:`~trustlit.interpret.sae.metrics.topk_auxiliary_loss`): the top ``k_aux`` pre-activations of the
dead atoms predict the residual; alpha = 1/32 (the paper's) and k_aux = d_in / 2 by default (the paper
uses 512 for its large models; d_in / 2 is SAELens' heuristic).

Notes: docs/methods/topk_sae.md
"""

from __future__ import annotations

from typing import Any

import torch

from trustlit.hparams import NonNegativeFloat, PositiveInt, check_arguments
from trustlit.interpret.sae.base import LinearEncoderSAE, SAEOutput
from trustlit.interpret.sae.metrics import check_k, topk_auxiliary_loss


def topk_codes(pre_activations: torch.Tensor, k: int) -> torch.Tensor:
    """ReLU of the k largest entries of each row of ``pre_activations`` [B, n], zeros elsewhere."""
    values, indices = pre_activations.topk(k, dim=-1)
    return torch.zeros_like(pre_activations).scatter(-1, indices, values.relu())


class TopKSAE(LinearEncoderSAE):
    """TopK SAE (see the module docstring).

    Args:
        d_in: width of the activations.
        n_latents: number of atoms.
        k: active latents per sample.
        aux_coefficient: alpha of AuxK (0 turns it off).
        k_aux: dead latents used by AuxK; default d_in // 2.
        Other arguments: see :class:`~trustlit.interpret.sae.base.SparseAutoencoder`.
    """

    def __init__(
        self,
        d_in: PositiveInt,
        n_latents: PositiveInt,
        k: PositiveInt = 32,
        aux_coefficient: NonNegativeFloat = 1 / 32,
        k_aux: PositiveInt | None = None,
        **kwargs: Any,
    ) -> None:
        check_arguments(TopKSAE.__init__, locals())
        check_k(int(k), int(n_latents), type(self).__name__)
        super().__init__(d_in, n_latents, **kwargs)
        self.k = int(k)
        self.k_aux = int(k_aux) if k_aux is not None else max(1, self.d_in // 2)

    def encode(self, x: torch.Tensor) -> torch.Tensor:
        return topk_codes(self.pre_activations(x), self.k)

    def training_codes(self, pre_activations: torch.Tensor) -> torch.Tensor:
        """The codes of a training batch from its pre-activations."""
        return topk_codes(pre_activations, self.k)

    def training_forward(self, x: torch.Tensor) -> SAEOutput:
        pre = self.pre_activations(x)
        z = self.training_codes(pre)
        x_hat = self.decode(z)
        terms = {}
        if self.hparams.aux_coefficient > 0:
            aux = topk_auxiliary_loss(x - x_hat, pre, self.W_dec, self.dead_mask(), self.k_aux)
            terms["aux"] = self.hparams.aux_coefficient * aux
        return SAEOutput(z, x_hat, terms)
