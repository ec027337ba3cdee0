"""Differential privacy: DP-SGD for any LightningModule, private multi-class SVMs, mechanisms, private
distribution estimation (Good-Turing) and private vaccination on contact networks."""

from trustlit.lazy import lazy_exports

__getattr__, __dir__, __all__ = lazy_exports(
    __name__,
    {
        "trustlit.per_sample": ["PerSampleLossModule"],
        "trustlit.privacy.distribution": [
            "add_constant",
            "dp_add_constant",
            "dp_good_turing",
            "dp_minimax",
            "empirical",
            "good_turing",
            "kl_divergence",
        ],
        "trustlit.privacy.distribution_analysis": ["PrivateDistributionEstimation"],
        "trustlit.privacy.dpsgd": ["DPSGD"],
        "trustlit.privacy.mechanisms": ["analytic_gaussian_sigma", "classic_gaussian_sigma"],
        "trustlit.privacy.pmsvm": ["PMSVM"],
        "trustlit.privacy.vaccination": [
            "greedy_max_degree",
            "greedy_spectral_radius",
            "private_max_degree",
            "private_spectral_radius",
            "simulate_sir",
        ],
        "trustlit.privacy.vaccination_analysis": ["PrivateVaccination"],
    },
)
