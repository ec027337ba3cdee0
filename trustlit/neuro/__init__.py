"""Brain decoding through a semantic bottleneck: voxels -> binary concepts -> a target embedding by two ridge
regressions (the first one's weights are voxel-importance maps per concept), the direct ridge baseline, their
metrics, the analysis module that runs them, and a voxel simulator (a stand-in for fMRI, stated as such).

Nothing heavy is imported until a name below is first used.
"""

from trustlit.lazy import lazy_exports

__getattr__, __dir__, __all__ = lazy_exports(
    __name__,
    {
        "trustlit.neuro.decoding": ["SemanticBottleneckDecoding"],
        "trustlit.neuro.semantic_bottleneck": [
            "DirectRidgeDecoder",
            "SemanticBottleneckDecoder",
            "cosine_similarity",
            "region_recovery_auc",
            "two_way_identification",
        ],
        "trustlit.neuro.ridge": ["RidgeSolution", "fit_ridge", "kfold_ridge"],
        "trustlit.neuro.simulator": ["simulate_voxels"],
    },
)
