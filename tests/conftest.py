from __future__ import annotations

import pytest

from trustlit.llm.loading import build_tiny_causal_lm, build_tokenizer


@pytest.fixture(scope="session")
def tokenizer():
    return build_tokenizer()


@pytest.fixture()
def tiny_lm(tokenizer):
    model, _ = build_tiny_causal_lm(hidden_size=32, num_layers=2, num_heads=2, tokenizer=tokenizer, seed=0)
    return model.eval()
