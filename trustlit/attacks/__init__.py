"""Attacks on learning and on data protection: instance-targeted poisoning against ERM and the randomized learner with
the optimal agnostic rate, and BridgePure's purification of protected (unlearnable) images.

Nothing heavy is imported until a name below is first used.
"""

from trustlit.lazy import lazy_exports

__getattr__, __dir__, __all__ = lazy_exports(
    __name__,
    {
        "trustlit.attacks.poisoning_analysis": ["TargetedPoisoning"],
        "trustlit.attacks.purification": [
            "BridgePure",
            "Purifier",
            "SupervisedDenoiser",
            "bridge_marginal",
            "bridge_scalings",
            "bridge_weighting",
            "karras_times",
            "pre_noise",
            "sample_bridge",
        ],
        "trustlit.attacks.purification_baselines": ["GaussianBlur", "GrayscaleJPEG", "JPEGCompression", "MedianFilter"],
        "trustlit.attacks.targeted_poisoning": [
            "ERMLearner",
            "FiniteClass",
            "IntervalUnions",
            "Intervals",
            "RandomizedLearner",
            "Thresholds",
            "coin_budget",
            "erm_attack",
            "hard_bias_support",
            "hard_coin_distribution",
            "hard_coin_poisoning",
            "naive_predict",
            "naive_public_attack",
            "randomized_attack",
            "seen_bits_attack",
            "stratified_bits",
        ],
    },
)
