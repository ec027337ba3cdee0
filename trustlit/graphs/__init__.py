"""Graph representations: TopER, the topological evolution rate of a filtration (pivot and growth of the line
through its vertex and edge counts), the paper's classifier on it, and the baselines it is compared with
(Weisfeiler-Lehman kernel, persistence images, the released ``toper`` package).

Nothing heavy is imported until a name below is first used.
"""

from trustlit.lazy import lazy_exports

__getattr__, __dir__, __all__ = lazy_exports(
    __name__,
    {
        "trustlit.graphs.classifier": ["TopERClassifier", "nested_cross_validation"],
        "trustlit.graphs.filtrations": ["forman_curvature", "resolve_filtration"],
        "trustlit.graphs.toper": ["feature_names", "toper_dataset_features", "toper_features"],
    },
)
