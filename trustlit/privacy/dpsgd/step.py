"""The DP-SGD step that the callback runs itself (manual optimisation): ghost clipping, physical batches.

Ghost clipping takes per-sample gradient norms from a first backward pass and backpropagates the
loss reweighted by the clipping coefficients in a second one, never materialising per-sample
gradients. Physical batches split a logical Poisson batch into chunks whose clipped gradients are
accumulated before one noisy step, so the accountant and ``trainer.global_step`` count logical steps.
"""

from __future__ import annotations

from typing import Any

import lightning as L
import torch
from opacus.grad_sample import GradSampleModule, GradSampleModuleFastGradientClipping
from opacus.optimizers import DPOptimizer

from trustlit.per_sample import PerSampleLossModule, mean_or_zero


def split_batch(batch: Any, size: int) -> list[Any]:
    """Chunks of at most ``size`` samples of a tensor, a tuple/list of tensors or a dict of tensors."""
    if isinstance(batch, torch.Tensor):
        return list(batch.split(size)) if len(batch) else [batch]
    if isinstance(batch, dict):
        parts = {k: split_batch(v, size) for k, v in batch.items()}
        return [dict(zip(parts, chunk, strict=True)) for chunk in zip(*parts.values(), strict=True)]
    if isinstance(batch, list | tuple) and any(isinstance(v, torch.Tensor | dict | list | tuple) for v in batch):
        parts = [split_batch(v, size) for v in batch]
        return [type(batch)(chunk) for chunk in zip(*parts, strict=True)]
    raise TypeError(f"max_physical_batch_size cannot split a batch of type {type(batch).__name__}")


def ghost_backward(
    module: L.LightningModule,
    hooks: GradSampleModuleFastGradientClipping,
    optimizer: DPOptimizer,
    losses: torch.Tensor,
) -> None:
    """Ghost clipping: per-sample norms from a first pass, the clipped sum from a second."""
    module.manual_backward(mean_or_zero(losses), retain_graph=True)
    optimizer.zero_grad()
    coefficients = hooks.get_clipping_coef().to(losses.device)
    hooks.disable_hooks()
    module.manual_backward((coefficients * losses).sum())
    hooks.enable_hooks()


def manual_dp_step(
    module: PerSampleLossModule,
    optimizer: DPOptimizer,
    hooks: GradSampleModule,
    batch: Any,
    ghost: bool,
    max_physical_batch_size: int | None,
) -> torch.Tensor:
    """One logical DP step of ``module`` on ``batch``; returns (and logs as ``train/loss``) its loss."""
    lightning_optimizer = module.optimizers()
    chunks = split_batch(batch, max_physical_batch_size) if max_physical_batch_size else [batch]
    total, count = torch.zeros((), device=module.device), 0
    for k, chunk in enumerate(chunks):
        losses = module.per_sample_losses(chunk)
        total, count = total + losses.detach().sum(), count + losses.numel()
        if ghost:
            ghost_backward(module, hooks, optimizer, losses)
        else:
            module.manual_backward(mean_or_zero(losses))
        if k < len(chunks) - 1:
            # clip and accumulate only: stepping the raw optimizer keeps global_step logical
            optimizer.signal_skip_step(do_skip=True)
            optimizer.step()
            optimizer.zero_grad()
    lightning_optimizer.step()
    lightning_optimizer.zero_grad()
    step_schedulers(module.trainer, "step")
    loss = total / max(1, count) + module.regularizer().detach()
    module.log("train/loss", loss, prog_bar=True, batch_size=max(1, count))
    return loss


def step_schedulers(trainer: L.Trainer, interval: str) -> None:
    """Lightning steps LR schedulers only under automatic optimisation: do it for the manual step."""
    count = trainer.global_step if interval == "step" else trainer.current_epoch + 1
    for config in trainer.lr_scheduler_configs:
        if config.interval == interval and count % config.frequency == 0:
            config.scheduler.step()
