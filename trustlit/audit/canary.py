"""A black-box canary audit: an empirical lower bound on epsilon from runs with and without one example.

Jagielski et al., "Auditing Differentially Private Machine Learning: How Private is Private SGD?"
(NeurIPS 2020); Nasr et al., "Adversary Instantiation: Lower Bounds for Differentially Private
Machine Learning" (IEEE S&P 2021). ``train_and_score(include_canary, seed)`` trains one model
(with the canary when ``include_canary``) and returns the canary's membership score. The first
half of the runs of each side chooses the test (:func:`~trustlit.audit.threshold.best_test`), the
second half evaluates it, so the bound holds with probability >= 1 - alpha.
Notes: docs/methods/privacy_audit.md
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from trustlit.audit.bounds import cp_upper, epsilon_lower_bound
from trustlit.audit.threshold import ThresholdTest, best_test

TrainAndScore = Callable[[bool, int], float]


@dataclass
class CanaryAudit:
    """Scores of the runs with (``scores_in``) and without (``scores_out``) the canary, and the bounds."""

    scores_in: np.ndarray
    scores_out: np.ndarray
    selection: int  # runs per side that chose the test; the others evaluated it
    test: ThresholdTest
    epsilon_lb: float  # the chosen test on the evaluation runs: a valid lower bound at 1 - alpha
    epsilon_lb_optimistic: float  # the best test on all runs, bounded on them: not a valid bound
    ceiling: float  # the largest bound the evaluation runs can give (perfect separation)
    seconds: float

    @property
    def evaluation(self) -> tuple[np.ndarray, np.ndarray]:
        """The scores that evaluated the test (with, without the canary)."""
        return self.scores_in[self.selection :], self.scores_out[self.selection :]


def audit_ceiling(runs_in: int, runs_out: int, delta: float, alpha: float) -> float:
    """The ε bound of a test that separates ``runs_in`` and ``runs_out`` runs perfectly: no audit of this size
    can show more."""
    return epsilon_lower_bound(cp_upper(0, runs_out, alpha / 2), cp_upper(0, runs_in, alpha / 2), delta)


def canary_scores(
    train_and_score: TrainAndScore, runs: int, on_progress: Callable[[int], None] | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """``runs`` scores with the canary (seeds 0, 2, 4, ...) and ``runs`` without (seeds 1, 3, ...), alternating
    so that a drifting machine affects both sides alike; ``on_progress(done)`` after every pair."""
    scores_in, scores_out = [], []
    for i in range(runs):
        scores_in.append(train_and_score(True, 2 * i))
        scores_out.append(train_and_score(False, 2 * i + 1))
        if on_progress is not None:
            on_progress(i + 1)
    return np.asarray(scores_in, dtype=np.float64), np.asarray(scores_out, dtype=np.float64)


def run_canary_audit(
    train_and_score: TrainAndScore,
    runs: int,
    delta: float,
    alpha: float = 0.05,
    on_progress: Callable[[int], None] | None = None,
) -> CanaryAudit:
    """Train ``runs`` models with the canary and ``runs`` without; bound epsilon (at ``delta``) from the scores.

    The test (threshold, direction, positive side) is chosen on the first half of each side and its
    bound, with both rates bounded by one-sided Clopper–Pearson at 1 - alpha/2, taken on the second
    half: ε >= ``epsilon_lb`` with probability >= 1 - alpha.
    """
    if runs < 2:
        raise ValueError(f"runs={runs!r} is invalid, expected at least 2 per side (half choose, half evaluate)")
    start = time.perf_counter()
    scores_in, scores_out = canary_scores(train_and_score, runs, on_progress)
    half = runs // 2
    test, _ = best_test(scores_in[:half], scores_out[:half], delta, alpha)
    epsilon_lb = test.epsilon_bound(scores_in[half:], scores_out[half:], delta, alpha)
    _, optimistic = best_test(scores_in, scores_out, delta, alpha)
    ceiling = audit_ceiling(runs - half, runs - half, delta, alpha)
    return CanaryAudit(scores_in, scores_out, half, test, epsilon_lb, optimistic, ceiling, time.perf_counter() - start)
