from __future__ import annotations

from pathlib import Path

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
