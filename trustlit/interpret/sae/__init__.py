"""Sparse autoencoders over harvested activations: one base class, one file per variant, the math in
``metrics`` (its ``matching_pursuit`` function is not re-exported here: the name is the variant's module).
Nothing heavy is imported until a name below is first used.

Notes: docs/methods/sparse_autoencoders.md
"""

from trustlit.lazy import lazy_exports

__getattr__, __dir__, __all__ = lazy_exports(
    __name__,
    {
        "trustlit.interpret.sae.base": ["SparseAutoencoder"],
        "trustlit.interpret.sae.relu": ["ReLUSAE"],
        "trustlit.interpret.sae.topk": ["TopKSAE"],
        "trustlit.interpret.sae.batch_topk": ["BatchTopKSAE"],
        "trustlit.interpret.sae.jumprelu": ["JumpReLUSAE"],
        "trustlit.interpret.sae.matching_pursuit": ["MatchingPursuitSAE"],
        "trustlit.interpret.sae.metrics": [
            "feature_recovery",
            "fvu",
            "geometric_median",
            "mean_l0",
            "revive_loss",
            "topk_auxiliary_loss",
        ],
    },
)
