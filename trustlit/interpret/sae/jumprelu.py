"""JumpReLU SAE (Rajamanoharan, Lieberum, Sonnerat, Conmy, Varma, Kramár, Nanda, "Jumping Ahead:
Improving Reconstruction Fidelity with JumpReLU Sparse Autoencoders", arXiv 2407.14435, 2024).

z = JumpReLU_theta(h) = h * H(h - theta), h = (x - b_pre) W_enc + b_enc, theta = exp(log_theta) > 0 per latent;
L = mean_b ||x_b - x_hat_b||^2 + lambda * mean_b ||z_b||_0, ||z_b||_0 = sum_j H(h_bj - theta_j).

H has no useful gradient, so theta is trained with straight-through pseudo-derivatives with the
rectangle kernel K(u) = 1[|u| < 1/2] and bandwidth epsilon (the paper's eq. 11–12):
d JumpReLU / d theta = -(theta / epsilon) K((h - theta) / epsilon),
d H(h - theta) / d theta = -(1 / epsilon) K((h - theta) / epsilon),
and no pseudo-derivative with respect to h (the L0 term trains only the thresholds).
Defaults are the paper's: epsilon = 0.001, theta initialised to 0.001, Adam with beta1 = 0 and
beta2 = 0.999 (for inputs scaled so that E||x||^2 = d_in); lambda sets the sparsity.

Notes: docs/methods/jumprelu_sae.md
"""

from __future__ import annotations

import math
from typing import Any

import torch

from trustlit.hparams import NonNegativeFloat, PositiveFloat, PositiveInt, check_arguments
from trustlit.interpret.sae.base import LinearEncoderSAE, SAEOutput


def rectangle(u: torch.Tensor) -> torch.Tensor:
    return ((u > -0.5) & (u < 0.5)).to(u.dtype)


class _JumpReLU(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, h: torch.Tensor, theta: torch.Tensor, bandwidth: float) -> torch.Tensor:
        ctx.save_for_backward(h, theta)
        ctx.bandwidth = bandwidth
        return h * (h > theta)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, None]:
        h, theta = ctx.saved_tensors
        kernel = rectangle((h - theta) / ctx.bandwidth)
        theta_grad = (-(theta / ctx.bandwidth) * kernel * grad).sum(dim=0)
        return (h > theta) * grad, theta_grad, None


class _Step(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, h: torch.Tensor, theta: torch.Tensor, bandwidth: float) -> torch.Tensor:
        ctx.save_for_backward(h, theta)
        ctx.bandwidth = bandwidth
        return (h > theta).to(h.dtype)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[None, torch.Tensor, None]:
        h, theta = ctx.saved_tensors
        kernel = rectangle((h - theta) / ctx.bandwidth)
        return None, (-(1.0 / ctx.bandwidth) * kernel * grad).sum(dim=0), None


def jumprelu(h: torch.Tensor, theta: torch.Tensor, bandwidth: float) -> torch.Tensor:
    """h * H(h - theta) with the straight-through pseudo-derivative for theta [n] (see the module docstring)."""
    return _JumpReLU.apply(h, theta, bandwidth)


def step(h: torch.Tensor, theta: torch.Tensor, bandwidth: float) -> torch.Tensor:
    """H(h - theta) with the straight-through pseudo-derivative for theta (none for h)."""
    return _Step.apply(h, theta, bandwidth)


class JumpReLUSAE(LinearEncoderSAE):
    """JumpReLU SAE (see the module docstring).

    Args:
        d_in: width of the activations.
        n_latents: number of atoms.
        l0_coefficient: lambda, the weight of the L0 penalty.
        bandwidth: epsilon of the pseudo-derivatives.
        threshold_init: initial theta of every latent.
        betas: Adam's (beta1, beta2); the paper's (0, 0.999).
        Other arguments: see :class:`~trustlit.interpret.sae.base.SparseAutoencoder`.
    """

    def __init__(
        self,
        d_in: PositiveInt,
        n_latents: PositiveInt,
        l0_coefficient: NonNegativeFloat = 1.0,
        bandwidth: PositiveFloat = 0.001,
        threshold_init: PositiveFloat = 0.001,
        betas: tuple[float, float] = (0.0, 0.999),
        **kwargs: Any,
    ) -> None:
        check_arguments(JumpReLUSAE.__init__, locals())
        super().__init__(d_in, n_latents, betas=betas, **kwargs)
        self.sparsity_coefficient = float(l0_coefficient)
        self.bandwidth = float(bandwidth)
        self.log_threshold = torch.nn.Parameter(torch.full((self.n_latents,), math.log(float(threshold_init))))

    @property
    def threshold(self) -> torch.Tensor:
        return self.log_threshold.exp()

    def encode(self, x: torch.Tensor) -> torch.Tensor:
        h = self.pre_activations(x)
        return h * (h > self.threshold)

    def training_forward(self, x: torch.Tensor) -> SAEOutput:
        h = self.pre_activations(x)
        theta = self.threshold
        z = jumprelu(h, theta, self.bandwidth)
        l0 = step(h, theta, self.bandwidth).sum(dim=-1).mean()
        return SAEOutput(z, self.decode(z), {"l0_penalty": self.sparsity_coefficient * l0})
