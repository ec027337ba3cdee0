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


@pytest.fixture(scope="module")
def one_thread():
    """One intra-op thread for a module of small models: on two shared cores, two threads per process
    oversubscribe and run several times slower. Modules opt in with ``pytestmark = pytest.mark.usefixtures(...)``."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
