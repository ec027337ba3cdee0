from __future__ import annotations

from pathlib import Path

import lightning as L
import pytest

from trustlit.models import build_tiny_causal_lm, build_tokenizer

REPO_ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO_ROOT.parent / "shared" / "data"


@pytest.fixture(scope="session")
def tokenizer():
    return build_tokenizer()


@pytest.fixture()
def tiny_lm(tokenizer):
    model, _ = build_tiny_causal_lm(hidden_size=32, num_layers=2, num_heads=2, tokenizer=tokenizer, seed=0)
    return model.eval()


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
