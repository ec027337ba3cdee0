"""ReLU SAE with an L1 penalty (Bricken et al., "Towards Monosemanticity", Transformer Circuits 2023;
the penalty weighted by the decoder norms as in Anthropic's April 2024 update and SAELens' StandardSAE).

z = ReLU(h), h = (x - b_pre) W_enc + b_enc;
L = mean_b ||x_b - x_hat_b||^2 + lambda * mean_b sum_j z_bj ||d_j||   (lambda = ``l1_coefficient``).

Here the atoms are kept at unit norm (see the base class), so ||d_j|| = 1 after every step; the
factor is kept in the formula so that the penalty cannot be evaded by the atoms' scale between steps.
The default lambda = 5 is the April update's, for inputs scaled so that E||x|| = sqrt(d_in);
the sparsity (L0) it gives depends on the data's scale, so set it per data set (the benchmark
tunes it to a target L0).

Notes: docs/methods/relu_sae.md
"""

from __future__ import annotations

from typing import Any

import torch

from trustlit.hparams import NonNegativeFloat, PositiveInt, check_arguments
from trustlit.interpret.sae.base import LinearEncoderSAE, SAEOutput


def l1_penalty(z: torch.Tensor, dictionary: torch.Tensor) -> torch.Tensor:
    """mean_b sum_j |z_bj| ||d_j||."""
    return (z.abs() * dictionary.norm(dim=-1)).sum(dim=-1).mean()


class ReLUSAE(LinearEncoderSAE):
    """ReLU SAE with a decoder-norm-weighted L1 penalty (see the module docstring).

    Args:
        d_in: width of the activations.
        n_latents: number of atoms.
        l1_coefficient: lambda.
        Other arguments: see :class:`~trustlit.interpret.sae.base.SparseAutoencoder`.
    """

    def __init__(
        self, d_in: PositiveInt, n_latents: PositiveInt, l1_coefficient: NonNegativeFloat = 5.0, **kwargs: Any
    ) -> None:
        check_arguments(ReLUSAE.__init__, locals())
        super().__init__(d_in, n_latents, **kwargs)
        self.sparsity_coefficient = float(l1_coefficient)

    def encode(self, x: torch.Tensor) -> torch.Tensor:
        return self.pre_activations(x).relu()

    def training_forward(self, x: torch.Tensor) -> SAEOutput:
        z = self.encode(x)
        return SAEOutput(z, self.decode(z), {"l1": self.sparsity_coefficient * l1_penalty(z, self.W_dec)})
