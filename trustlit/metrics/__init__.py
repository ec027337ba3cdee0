"""Evaluation metrics: pure functions on tensors and strings, logged by the methods."""

from trustlit.lazy import lazy_exports

__getattr__, __dir__, __all__ = lazy_exports(
    __name__,
    {
        "trustlit.audit.mia": ["roc_auc", "roc_curve", "tpr_at_fpr"],
        "trustlit.metrics.classification": ["log_accuracy"],
        "trustlit.metrics.images": ["psnr"],
        "trustlit.metrics.muse": [
            "knowmem",
            "min_k_scores",
            "privleak",
            "privleak_auc",
            "verbmem_scores",
        ],
        "trustlit.metrics.safety": [
            "ClassifierJudge",
            "Judge",
            "RegexJudge",
            "extract_final_answer",
            "finetune_accuracy",
            "harmful_score",
            "is_correct",
            "load_judge",
            "weight_auroc",
        ],
        "trustlit.metrics.text": [
            "answer_probability",
            "is_degenerate",
            "is_non_answer",
            "is_refusal",
            "repetition",
            "rouge_l_f1",
            "rouge_l_recall",
        ],
        "trustlit.metrics.tofu": [
            "SplitScores",
            "forget_quality",
            "forget_truth_ratio_score",
            "harmonic_mean",
            "model_utility",
            "normalised_probability",
            "answer_rates",
            "retain_truth_ratio_score",
            "score_split",
            "summarise_split",
            "truth_ratio",
        ],
    },
)
