"""Attacks on learning and on data protection: instance-targeted poisoning against ERM and the randomized learner with
the optimal agnostic rate, and BridgePure's purification of protected (unlearnable) images.

Nothing heavy is imported until a name below is first used.
"""

from trustlit.lazy import lazy_exports

__getattr__, __dir__, __all__ = lazy_exports(
    __name__,
    {
        "trustlit.attacks.poisoning_analysis": ["TargetedPoisoning"],
        "trustlit.attacks.targeted_poisoning": [
            "ERMLearner",
            "FiniteClass",
            "IntervalUnions",
            "Intervals",
            "RandomizedLearner",
            "Thresholds",
            "erm_attack",
            "hard_coin_distribution",
            "randomized_attack",
            "seen_bits_attack",
        ],
    },
)
