"""Attribution: value functions over player masks, the unified KernelSHAP family and exact Shapley values,
ProxySPEX interactions, the LASSO baseline, the analysis modules that run them from recipes, and Contimask saliency
for irregular time series.

Nothing heavy is imported until a name below is first used.
"""

from trustlit.lazy import lazy_exports

__getattr__, __dir__, __all__ = lazy_exports(
    __name__,
    {
        "trustlit.attribution.value": [
            "CountingValue",
            "RestrictedValue",
            "TabularValue",
            "TokenValue",
            "ValueFunction",
        ],
        "trustlit.attribution.shapley": ["ShapleyResult", "exact_shapley", "kernel_shap", "unbiased_kernel_shap"],
        "trustlit.attribution.proxy_spex": ["InteractionResult", "proxyspex"],
        "trustlit.attribution.linear": ["additive_faithfulness", "holdout_masks", "lasso_attribution"],
        "trustlit.attribution.explain": ["TabularShapley", "TokenInteractions"],
        "trustlit.attribution.contimask": ["Contimask"],
        "trustlit.attribution.saliency": [
            "aup",
            "aur",
            "auprc",
            "dynamask_grid",
            "eraser_scores",
            "integrated_gradients",
            "occlusion",
            "removal_curves",
            "saliency_metrics",
        ],
    },
)
