"""The DP optimiser: Opacus's clipping-and-noise wrapper around the module's optimiser, accounted at every step.

Opacus overwrites ``p.grad`` with the privatised gradient, so a data-independent regulariser's
gradient is added back after clipping and noise (it reads no data and needs no privacy).
"""

from __future__ import annotations

from typing import Literal

import lightning as L
import torch
from opacus.accountants import IAccountant
from opacus.optimizers import DPOptimizer, get_optimizer_class

Clipping = Literal["flat", "per_layer"]
GradSampleMode = Literal["hooks", "functorch", "ghost"]


def per_layer_norms(max_grad_norm: float, tensors: int) -> list[float]:
    """The same total norm C split evenly over ``tensors`` parameter tensors: C / sqrt(tensors) each."""
    return [max_grad_norm / tensors**0.5] * tensors


def wrap_optimizer(
    optimizer: torch.optim.Optimizer,
    module: L.LightningModule,
    accountant: IAccountant,
    *,
    noise_multiplier: float,
    max_grad_norm: float,
    clipping: Clipping,
    grad_sample_mode: GradSampleMode,
    sample_rate: float,
    expected_batch_size: float,
    distributed: bool,
) -> DPOptimizer:
    """``optimizer`` behind Opacus's DP optimiser, whose every step is accounted and gets the regulariser's gradient.

    ``expected_batch_size`` is this rank's (the global one over the world size under DDP).
    """
    optimizer_class = get_optimizer_class(clipping, distributed, grad_sample_mode)
    params = [p for group in optimizer.param_groups for p in group["params"] if p.requires_grad]
    dp_optimizer = optimizer_class(
        optimizer=optimizer,
        noise_multiplier=noise_multiplier,
        max_grad_norm=per_layer_norms(max_grad_norm, len(params)) if clipping == "per_layer" else max_grad_norm,
        expected_batch_size=expected_batch_size,
        loss_reduction="mean",
    )
    account = accountant.get_optimizer_hook_fn(sample_rate=sample_rate)

    def step_hook(stepped: DPOptimizer) -> None:
        account(stepped)
        add_regularizer_gradient(module)

    dp_optimizer.attach_step_hook(step_hook)
    return dp_optimizer


def add_regularizer_gradient(module: L.LightningModule) -> None:
    """Add grad(regularizer) to the privatised gradient: Opacus dropped it from the loss."""
    regularizer = getattr(module, "regularizer", None)
    if regularizer is None:
        return
    params = [p for p in module.parameters() if p.requires_grad]
    with torch.enable_grad():
        value = regularizer()
        if not value.requires_grad:
            return
        grads = torch.autograd.grad(value, params, allow_unused=True)
    for p, g in zip(params, grads, strict=True):
        if g is not None:
            p.grad = g if p.grad is None else p.grad + g
