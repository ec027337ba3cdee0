"""Threshold tests on membership scores, and the best one: shared by canary audits and membership inference.

A score is higher when the audited example is more likely a member. Scores of outputs trained
with it ("in", dataset D) and without it ("out", D') are the two populations. A
:class:`ThresholdTest` says "positive" on ``score >= threshold`` (or ``<``); ``positive`` names the
population that event claims: ``in`` gives the bound log((1 - δ - FNR)/FPR) of P_D(E) <= e^ε P_D'(E) + δ,
``out`` the same inequality with D and D' exchanged (DP bounds both directions).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import numpy as np

from trustlit.audit.bounds import cp_upper, epsilon_lower_bound


@dataclass(frozen=True)
class ThresholdTest:
    """Say ``positive`` on ``score >= threshold`` (``above``) or ``score < threshold``."""

    threshold: float
    above: bool
    positive: Literal["in", "out"] = "in"

    def hits(self, scores: np.ndarray) -> int:
        """How many ``scores`` fall in the test's event."""
        return int(np.sum(scores >= self.threshold if self.above else scores < self.threshold))

    def errors(self, scores_in: np.ndarray, scores_out: np.ndarray) -> tuple[int, int, int, int]:
        """(false positives, negatives, false negatives, positives): counts behind FPR and FNR."""
        positives, negatives = (scores_in, scores_out) if self.positive == "in" else (scores_out, scores_in)
        return self.hits(negatives), len(negatives), len(positives) - self.hits(positives), len(positives)

    def epsilon_bound(self, scores_in: np.ndarray, scores_out: np.ndarray, delta: float, alpha: float) -> float:
        """The lower bound on ε at confidence 1 - alpha: both rates by one-sided Clopper–Pearson at 1 - alpha/2."""
        false_positives, negatives, false_negatives, positives = self.errors(scores_in, scores_out)
        fpr = cp_upper(false_positives, negatives, alpha / 2)
        fnr = cp_upper(false_negatives, positives, alpha / 2)
        return epsilon_lower_bound(fpr, fnr, delta)

    def epsilon_estimate(self, scores_in: np.ndarray, scores_out: np.ndarray, delta: float) -> float:
        """log((1 - δ - FNR)/FPR) from smoothed rates ((k + 1/2)/(n + 1)): not a bound, breaks ties between tests."""
        false_positives, negatives, false_negatives, positives = self.errors(scores_in, scores_out)
        power = 1 - delta - (false_negatives + 0.5) / (positives + 1)
        return math.log(power / ((false_positives + 0.5) / (negatives + 1))) if power > 0 else -math.inf

    def describe(self) -> str:
        event = f"score {'>=' if self.above else '<'} {self.threshold:.4g}"
        return f"{event}, {'P_in/P_out' if self.positive == 'in' else 'P_out/P_in'}"


def candidate_thresholds(scores: np.ndarray) -> np.ndarray:
    """Midpoints between consecutive distinct scores, and one beyond each end."""
    values = np.unique(scores)
    return np.concatenate([[values[0] - 1.0], (values[1:] + values[:-1]) / 2, [values[-1] + 1.0]])


def best_test(scores_in: np.ndarray, scores_out: np.ndarray, delta: float, alpha: float) -> tuple[ThresholdTest, float]:
    """The threshold, direction and positive side with the largest ε bound on these scores (ties: the largest
    point estimate); returns the test and its bound. The bound is optimistic on the scores that chose the
    test: evaluate the test on other runs for a valid one (:func:`~trustlit.audit.canary.run_canary_audit`)."""
    scores_in, scores_out = np.asarray(scores_in, dtype=np.float64), np.asarray(scores_out, dtype=np.float64)
    best, best_key = None, (-math.inf, -math.inf)
    for threshold in candidate_thresholds(np.concatenate([scores_in, scores_out])):
        for above in (True, False):
            for positive in ("in", "out"):
                test = ThresholdTest(float(threshold), above, positive)
                key = (
                    test.epsilon_bound(scores_in, scores_out, delta, alpha),
                    test.epsilon_estimate(scores_in, scores_out, delta),
                )
                if key > best_key:
                    best, best_key = test, key
    return best, best_key[0]
