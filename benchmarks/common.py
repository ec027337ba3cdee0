"""Shared by the benchmark scripts: machine facts for the reports, quiet short runs."""

from __future__ import annotations

import logging
import platform
import warnings
from pathlib import Path

import lightning as L


def cpu_model() -> str:
    """The CPU's model name from /proc/cpuinfo, else what the platform reports."""
    cpuinfo = Path("/proc/cpuinfo")
    lines = cpuinfo.read_text(encoding="utf-8").splitlines() if cpuinfo.is_file() else []
    names = [line.split(":", 1)[1].strip() for line in lines if line.startswith("model name")]
    return names[0] if names else platform.processor() or "unknown"


def quiet() -> None:
    """Silence Lightning's per-fit banners and the warnings every short (DP) run repeats."""
    for name in ("lightning.pytorch", "lightning.fabric", "lightning"):
        logging.getLogger(name).setLevel(logging.ERROR)
    for message in (
        ".*does not have many workers.*",
        ".*GPU available but not used.*",
        ".*smaller than the logging interval.*",
        ".*Secure RNG turned off.*",
        ".*Using a non-full backward hook.*",
        ".*Full backward hook is firing.*",
        ".*but have no `validation_step`.*",
        ".*but have no `val_dataloader`.*",
        ".*LeafSpec.*is deprecated.*",
        ".*isinstance.treespec, LeafSpec.*",
        ".*In CPU autocast, but the target dtype is not supported.*",
        ".*Optimal order is the (largest|smallest) alpha.*",
    ):
        warnings.filterwarnings("ignore", message=message)


def bare_trainer(callbacks: list[L.Callback], **budget: int) -> L.Trainer:
    """A plain CPU Trainer: no logger, checkpoints, progress bar or validation; ``budget``: max_steps/max_epochs."""
    return L.Trainer(
        accelerator="cpu",
        devices=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        limit_val_batches=0,
        num_sanity_val_steps=0,
        callbacks=callbacks,
        **budget,
    )
