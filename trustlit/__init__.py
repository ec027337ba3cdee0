"""trustlit: a PyTorch Lightning framework for trustworthy-ML research.

Importing ``trustlit`` imports nothing heavy (no torch): the names below load on first use.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

_LAZY = {
    "CausalLMFineTuning": "trustlit.finetune",
    "CausalLMModule": "trustlit.llm.module",
    "CausalLMSpec": "trustlit.llm.loading",
    "build_tiny_causal_lm": "trustlit.llm.loading",
    "build_tokenizer": "trustlit.llm.loading",
    "load_causal_lm": "trustlit.llm.loading",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module 'trustlit' has no attribute '{name}'")
    return getattr(importlib.import_module(_LAZY[name]), name)


def __dir__() -> list[str]:
    return sorted([*globals(), *_LAZY])
