"""trustlit: a PyTorch Lightning framework for trustworthy-ML research.

Importing ``trustlit`` imports nothing heavy (no torch): the names below load on first use.
"""

from trustlit.lazy import lazy_exports

__version__ = "0.1.0"

__getattr__, __dir__, __all__ = lazy_exports(
    __name__,
    {
        "trustlit.finetune": ["CausalLMFineTuning"],
        "trustlit.llm.module": ["CausalLMModule"],
        "trustlit.llm.loading": ["CausalLMSpec", "build_tiny_causal_lm", "build_tokenizer", "load_causal_lm"],
    },
)
