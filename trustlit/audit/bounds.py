"""Confidence bounds for privacy audits: Clopper–Pearson intervals on binomial rates, and the lower
bound on epsilon that a membership test's error rates imply.

An (ε, δ)-DP mechanism M satisfies, for every event E on its output and neighbouring datasets D, D',
P[M(D) ∈ E] <= e^ε P[M(D') ∈ E] + δ. For a test that says "member" on E, with false-positive rate
FPR = P[M(D') ∈ E] and false-negative rate FNR = P[M(D) ∉ E], this reads

    ε >= log((1 - δ - FNR) / FPR).

The bound decreases in both rates, so it holds at confidence 1 - α when FPR and FNR are replaced by
upper confidence bounds that hold jointly with probability >= 1 - α (e.g. one-sided Clopper–Pearson
bounds at level 1 - α/2 each). Notes: docs/methods/privacy_audit.md
"""

from __future__ import annotations

import functools
import math

from scipy.stats import beta


def _check_counts(k: int, n: int, alpha: float) -> None:
    if not (n >= 1 and 0 <= k <= n):
        raise ValueError(f"need 0 <= k <= n and n >= 1 (k hits of n trials), got k={k}, n={n}")
    if not 0 < alpha < 1:
        raise ValueError(f"alpha={alpha!r} is invalid, expected a number in (0, 1)")


@functools.lru_cache(maxsize=1 << 16)  # a threshold search asks for the same (k, n) many times
def cp_lower(k: int, n: int, alpha: float) -> float:
    """One-sided Clopper–Pearson lower bound (level 1 - alpha) on a binomial rate from k hits of n:
    the alpha quantile of Beta(k, n - k + 1); 0 for k = 0."""
    _check_counts(k, n, alpha)
    return 0.0 if k == 0 else float(beta.ppf(alpha, k, n - k + 1))


@functools.lru_cache(maxsize=1 << 16)
def cp_upper(k: int, n: int, alpha: float) -> float:
    """One-sided Clopper–Pearson upper bound (level 1 - alpha) on a binomial rate from k hits of n:
    the 1 - alpha quantile of Beta(k + 1, n - k); 1 for k = n."""
    _check_counts(k, n, alpha)
    return 1.0 if k == n else float(beta.ppf(1 - alpha, k + 1, n - k))


def clopper_pearson(k: int, n: int, alpha: float) -> tuple[float, float]:
    """The two-sided Clopper–Pearson interval (confidence 1 - alpha) on a binomial rate from k hits of n:
    the one-sided bounds at level 1 - alpha/2 each."""
    return cp_lower(k, n, alpha / 2), cp_upper(k, n, alpha / 2)


def epsilon_lower_bound(fpr: float, fnr: float, delta: float) -> float:
    """ε >= log((1 - δ - FNR) / FPR), clipped at 0; infinite when FPR = 0 < 1 - δ - FNR.

    Give upper confidence bounds of the two rates for a confidence bound on ε (module docstring).
    """
    for name, rate in (("fpr", fpr), ("fnr", fnr)):
        if not 0 <= rate <= 1:
            raise ValueError(f"{name}={rate!r} is invalid, expected a rate in [0, 1]")
    if not 0 <= delta < 1:
        raise ValueError(f"delta={delta!r} is invalid, expected a number in [0, 1)")
    power = 1 - delta - fnr
    if power <= 0:
        return 0.0
    if fpr == 0:
        return math.inf
    return max(0.0, math.log(power / fpr))
