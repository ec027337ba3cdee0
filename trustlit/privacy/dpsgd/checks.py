"""What DP-SGD refuses before a fit starts: layers Opacus cannot privatise, and trainer settings that
would break the guarantee (the accounting's assumptions) or DDP's collectives."""

from __future__ import annotations

import lightning as L
import torch
from lightning.pytorch.strategies import DDPStrategy
from opacus.validators import ModuleValidator

from trustlit.strategies import DDP, SINGLE_DEVICE, check_strategy

# class names of the Lightning strategies DPSGD runs under (subclasses too, except DeepSpeed)
DPSGD_STRATEGIES = (SINGLE_DEVICE, DDP)


def is_distributed(trainer: L.Trainer) -> bool:
    """Whether the run is DDP over more than one process."""
    return isinstance(trainer.strategy, DDPStrategy) and trainer.world_size > 1


def validate_privatisable(module: torch.nn.Module) -> None:
    """Raise if Opacus cannot compute per-sample gradients for a layer of ``module``."""
    errors = ModuleValidator.validate(module, strict=False)
    if errors:
        details = "; ".join(str(e) for e in errors)
        raise ValueError(
            f"DPSGD cannot privatise {type(module).__name__}: {details}. Replace BatchNorm by GroupNorm "
            "(or LayerNorm), or convert the model with opacus.validators.ModuleValidator.fix(model)"
        )


def check_trainer(trainer: L.Trainer, poisson_sampling: bool, max_physical_batch_size: int | None) -> None:
    """Raise on a strategy, accumulation, clipping or precision setting DP-SGD cannot honour."""
    # FSDP and ModelParallelStrategy shard parameters; DeepSpeed, though a DDPStrategy subclass, runs its own step
    check_strategy("DPSGD", trainer.strategy, DPSGD_STRATEGIES, "Opacus's per-sample gradient hooks need whole layers")
    if trainer.accumulate_grad_batches != 1:
        raise ValueError(
            "DPSGD refuses accumulate_grad_batches > 1 (each accumulated batch would be accounted as a "
            "separate Poisson sample): raise the batch size, or use max_physical_batch_size for memory"
        )
    if trainer.gradient_clip_val:
        raise ValueError(
            "DPSGD refuses gradient_clip_val: Opacus replaces the clipped gradient by its own; per-sample "
            "clipping is set by DPSGD(max_grad_norm=...)"
        )
    if str(trainer.precision).startswith("16"):
        raise ValueError(
            f"DPSGD refuses precision={trainer.precision}: the loss scale of 16-bit mixed precision inflates "
            "every per-sample gradient before clipping; use 32-true or bf16-mixed"
        )
    if is_distributed(trainer):
        check_distributed(trainer, poisson_sampling, max_physical_batch_size)


def check_distributed(trainer: L.Trainer, poisson_sampling: bool, max_physical_batch_size: int | None) -> None:
    """Raise on a DDP setting that would count samples twice or desynchronise the ranks."""
    if trainer._accelerator_connector.use_distributed_sampler:
        raise ValueError(
            "DPSGD under DDP installs a distributed Poisson sampler: set Trainer(use_distributed_sampler=False)"
        )
    if not poisson_sampling:
        raise ValueError(
            "DPSGD under DDP needs poisson_sampling=True: without it every rank would train on the "
            "same batches and each sample would be counted once per rank"
        )
    if max_physical_batch_size is not None:
        raise ValueError(
            "DPSGD does not support max_physical_batch_size under DDP (ranks would split their Poisson "
            "batches into different numbers of backward passes): use more ranks or a smaller batch"
        )
