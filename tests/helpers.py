"""Helpers shared by test modules (``from helpers import ...``; conftest.py only holds fixtures,
since ``tests/slurm`` has a conftest of its own and ``import conftest`` would be ambiguous)."""

from __future__ import annotations

from pathlib import Path

import lightning as L

REPO_ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO_ROOT.parent / "shared" / "data"


def quiet_trainer(**kwargs) -> L.Trainer:
    """A CPU Trainer without logger, checkpoints, progress bar, summary or validation."""
    return L.Trainer(
        accelerator="cpu",
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        limit_val_batches=0,
        num_sanity_val_steps=0,
        **kwargs,
    )
