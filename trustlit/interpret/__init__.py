"""Interpretability of LLM internals: sparse autoencoders (``sae/``, with the matching-pursuit SAE), the
intrinsic dimension of layer representations, and hallucination source tracing.

Nothing heavy is imported until a name below is first used.
"""

from trustlit.lazy import lazy_exports

__getattr__, __dir__, __all__ = lazy_exports(
    __name__,
    {
        "trustlit.interpret.intrinsic_dimension": ["gride", "mle", "twonn"],
        "trustlit.interpret.layer_dimension": ["IntrinsicDimension"],
        "trustlit.interpret.tracing": ["SubsequenceTracing", "trace_subsequences"],
    },
)
