"""Evaluation metrics: pure functions on tensors and strings, logged by the methods."""

from trustlit.metrics.classification import log_accuracy
from trustlit.metrics.muse import knowmem, min_k_prob, min_k_scores, privleak, privleak_auc, roc_auc, verbmem_scores
from trustlit.metrics.safety import (
    ClassifierJudge,
    Judge,
    RegexJudge,
    extract_final_answer,
    finetune_accuracy,
    harmful_score,
    is_correct,
    load_judge,
    weight_auroc,
)
from trustlit.metrics.text import answer_probability, is_refusal, rouge_l_f1, rouge_l_recall
from trustlit.metrics.tofu import (
    SplitScores,
    forget_quality,
    forget_truth_ratio_score,
    harmonic_mean,
    model_utility,
    normalised_probability,
    refusal_rates,
    retain_truth_ratio_score,
    score_split,
    summarise_split,
    truth_ratio,
)

__all__ = [
    "ClassifierJudge",
    "Judge",
    "RegexJudge",
    "SplitScores",
    "answer_probability",
    "extract_final_answer",
    "finetune_accuracy",
    "forget_quality",
    "forget_truth_ratio_score",
    "harmful_score",
    "harmonic_mean",
    "is_correct",
    "is_refusal",
    "knowmem",
    "load_judge",
    "log_accuracy",
    "min_k_prob",
    "min_k_scores",
    "model_utility",
    "normalised_probability",
    "privleak",
    "privleak_auc",
    "refusal_rates",
    "retain_truth_ratio_score",
    "roc_auc",
    "rouge_l_f1",
    "rouge_l_recall",
    "score_split",
    "summarise_split",
    "truth_ratio",
    "verbmem_scores",
    "weight_auroc",
]
