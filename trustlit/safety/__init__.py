"""Defenses against harmful fine-tuning and their evaluation.

Fine-tuning-stage defenses: :class:`Panacea`, :class:`BDS`, :class:`Lisa`; alignment-stage
defenses: :class:`Vaccine`, :class:`Booster`, :class:`RepNoise`; :class:`SFT` is the undefended
baseline of either stage. Update rules are pure functions in ``updates.py`` and ``losses.py``.
"""

from trustlit.lazy import lazy_exports

__getattr__, __dir__, __all__ = lazy_exports(
    __name__,
    {
        "trustlit.safety.base": ["SafetyModule"],
        "trustlit.safety.baselines": ["Booster", "Lisa", "RepNoise", "SFT", "Vaccine"],
        "trustlit.safety.bds": ["BDS"],
        "trustlit.safety.evaluation": ["SafetyEvaluation", "evaluate_safety"],
        "trustlit.safety.panacea": ["ApplyPanaceaPerturbation", "Panacea"],
    },
)
