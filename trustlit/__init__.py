"""trustlit: a PyTorch Lightning framework for trustworthy-ML research."""

from trustlit.finetune import CausalLMFineTuning
from trustlit.lm_module import CausalLMModule
from trustlit.models import CausalLMSpec, build_tiny_causal_lm, build_tokenizer, load_causal_lm

__version__ = "0.1.0"

__all__ = [
    "CausalLMFineTuning",
    "CausalLMModule",
    "CausalLMSpec",
    "build_tiny_causal_lm",
    "build_tokenizer",
    "load_causal_lm",
]
