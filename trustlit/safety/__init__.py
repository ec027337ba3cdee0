"""Defenses against harmful fine-tuning and their evaluation.

Fine-tuning-stage defenses: :class:`Panacea`, :class:`BDS`, :class:`Lisa`; alignment-stage
defenses: :class:`Vaccine`, :class:`Booster`, :class:`RepNoise`; :class:`SFT` is the undefended
baseline of either stage. Update rules are pure functions in ``updates.py`` and ``losses.py``.
"""

from trustlit.safety.base import SafetyModule
from trustlit.safety.baselines import SFT, Booster, Lisa, RepNoise, Vaccine
from trustlit.safety.bds import BDS
from trustlit.safety.evaluation import SafetyEvaluation, evaluate_safety
from trustlit.safety.panacea import ApplyPanaceaPerturbation, Panacea

__all__ = [
    "BDS",
    "SFT",
    "ApplyPanaceaPerturbation",
    "Booster",
    "Lisa",
    "Panacea",
    "RepNoise",
    "SafetyEvaluation",
    "SafetyModule",
    "Vaccine",
    "evaluate_safety",
]
