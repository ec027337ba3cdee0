"""Differential privacy: DP-SGD for any LightningModule, private multi-class SVMs, mechanisms."""

from trustlit.lazy import lazy_exports

__getattr__, __dir__, __all__ = lazy_exports(
    __name__,
    {
        "trustlit.per_sample": ["PerSampleLossModule"],
        "trustlit.privacy.dpsgd": ["DPSGD"],
        "trustlit.privacy.mechanisms": ["analytic_gaussian_sigma", "classic_gaussian_sigma"],
        "trustlit.privacy.pmsvm": ["PMSVM"],
    },
)
