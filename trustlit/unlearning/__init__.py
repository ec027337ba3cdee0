"""LLM unlearning: pure losses (``losses.py``), one LightningModule per method, evaluation."""

from trustlit.unlearning.attention_shifting import AttentionShifting
from trustlit.unlearning.base import PreferenceUnlearning, ReferenceModel, UnlearningModule
from trustlit.unlearning.evaluation import UnlearningEvaluation
from trustlit.unlearning.grad_ascent import GradAscent
from trustlit.unlearning.grad_diff import GradDiff
from trustlit.unlearning.idk_dpo import IdkDPO
from trustlit.unlearning.kl import KLMinimization
from trustlit.unlearning.lunar import LUNAR
from trustlit.unlearning.npo import NPO
from trustlit.unlearning.rmu import RMU
from trustlit.unlearning.simnpo import SimNPO

__all__ = [
    "LUNAR",
    "NPO",
    "RMU",
    "AttentionShifting",
    "GradAscent",
    "GradDiff",
    "IdkDPO",
    "KLMinimization",
    "PreferenceUnlearning",
    "ReferenceModel",
    "SimNPO",
    "UnlearningEvaluation",
    "UnlearningModule",
]
