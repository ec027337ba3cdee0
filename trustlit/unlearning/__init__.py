"""LLM unlearning: pure losses (``losses.py``), one LightningModule per method, evaluation."""

from trustlit.lazy import lazy_exports

__getattr__, __dir__, __all__ = lazy_exports(
    __name__,
    {
        "trustlit.unlearning.attention_shifting": ["AttentionShifting"],
        "trustlit.unlearning.base": ["PreferenceUnlearning", "ReferenceModel", "UnlearningModule"],
        "trustlit.unlearning.evaluation": ["UnlearningEvaluation"],
        "trustlit.unlearning.grad_ascent": ["GradAscent"],
        "trustlit.unlearning.grad_diff": ["GradDiff"],
        "trustlit.unlearning.idk_dpo": ["IdkDPO"],
        "trustlit.unlearning.kl": ["KLMinimization"],
        "trustlit.unlearning.lunar": ["LUNAR"],
        "trustlit.unlearning.npo": ["NPO"],
        "trustlit.unlearning.rmu": ["RMU"],
        "trustlit.unlearning.simnpo": ["SimNPO"],
    },
)
