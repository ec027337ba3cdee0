"""Privacy audits and membership inference.

- :mod:`~trustlit.audit.bounds`: Clopper–Pearson bounds, the ε bound from (FPR, FNR) at δ;
- :mod:`~trustlit.audit.threshold`: threshold tests on membership scores and the best one;
- :mod:`~trustlit.audit.canary`: the canary audit over runs with and without one example;
- :mod:`~trustlit.audit.mia`: membership-inference scorers on per-token log-probabilities (LOSS, zlib,
  Min-K%, Min-K%++, reference), AUC / TPR at low FPR, and the :class:`MembershipInference` callback;
- :mod:`~trustlit.audit.neighbourhood`: relaxed membership (n-gram, embedding, edit distance, exact match);
- :mod:`~trustlit.audit.mia_poisoning`: poisons that make the tests err on a target (:class:`MIAPoisoning`).

Exports load on first use: ``mia`` brings torch, Lightning and transformers, the bounds only scipy.
Notes: docs/methods/privacy_audit.md, docs/methods/membership_inference.md, docs/methods/mia_poisoning.md
"""

from trustlit.lazy import lazy_exports

__getattr__, __dir__, __all__ = lazy_exports(
    __name__,
    {
        "trustlit.audit.bounds": ["clopper_pearson", "cp_lower", "cp_upper", "epsilon_lower_bound"],
        "trustlit.audit.canary": ["CanaryAudit", "audit_ceiling", "canary_scores", "run_canary_audit"],
        "trustlit.audit.threshold": ["ThresholdTest", "best_test", "candidate_thresholds"],
        "trustlit.audit.mia": [
            "MembershipInference",
            "loss_score",
            "min_k_plus_plus_score",
            "min_k_score",
            "model_token_statistics",
            "reference_score",
            "roc_auc",
            "roc_curve",
            "token_statistics",
            "tpr_at_fpr",
            "zlib_score",
        ],
        "trustlit.audit.mia_poisoning": [
            "MIAPoisoning",
            "build_poisoned_data",
            "poison_neighbour",
            "poison_non_neighbour",
            "run_poisoning_experiment",
        ],
        "trustlit.audit.neighbourhood": ["Neighbourhood", "in_neighbourhood"],
    },
)
