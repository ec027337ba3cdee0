"""Privacy audits: empirical lower bounds on epsilon from membership tests.

- :mod:`~trustlit.audit.bounds`: Clopper–Pearson bounds, the ε bound from (FPR, FNR) at δ;
- :mod:`~trustlit.audit.threshold`: threshold tests on membership scores and the best one;
- :mod:`~trustlit.audit.canary`: the canary audit over runs with and without one example.

Membership-inference scorers produce scores for the same tests. Notes: docs/methods/privacy_audit.md
"""

from trustlit.audit.bounds import clopper_pearson, cp_lower, cp_upper, epsilon_lower_bound
from trustlit.audit.canary import CanaryAudit, audit_ceiling, canary_scores, run_canary_audit
from trustlit.audit.threshold import ThresholdTest, best_test, candidate_thresholds

__all__ = [
    "CanaryAudit",
    "ThresholdTest",
    "audit_ceiling",
    "best_test",
    "canary_scores",
    "candidate_thresholds",
    "clopper_pearson",
    "cp_lower",
    "cp_upper",
    "epsilon_lower_bound",
    "run_canary_audit",
]
