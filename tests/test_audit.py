"""The privacy audit: Clopper–Pearson bounds, the epsilon bound from (FPR, FNR), threshold tests, canary audits."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import pytest
from scipy.stats import beta, binom

from trustlit.audit import (
    ThresholdTest,
    audit_ceiling,
    best_test,
    clopper_pearson,
    cp_lower,
    cp_upper,
    epsilon_lower_bound,
    run_canary_audit,
)
from trustlit.privacy.mechanisms import gaussian_mechanism_epsilon

DELTA = 1e-5


@pytest.mark.parametrize(("k", "n"), [(1, 10), (3, 10), (9, 10), (17, 40), (50, 100)])
def test_clopper_pearson_matches_the_beta_quantiles_and_the_binomial_tails(k, n):
    alpha = 0.05
    lower, upper = cp_lower(k, n, alpha), cp_upper(k, n, alpha)
    assert lower == pytest.approx(beta.ppf(alpha, k, n - k + 1), rel=1e-12)
    assert upper == pytest.approx(beta.ppf(1 - alpha, k + 1, n - k), rel=1e-12)
    # the defining property: at the bound, seeing k or more (k or fewer) hits has probability alpha
    assert binom.sf(k - 1, n, lower) == pytest.approx(alpha, rel=1e-8)
    assert binom.cdf(k, n, upper) == pytest.approx(alpha, rel=1e-8)
    assert lower < k / n < upper


def test_clopper_pearson_edges_have_closed_forms():
    n, alpha = 10, 0.05
    assert cp_lower(0, n, alpha) == 0.0
    assert cp_upper(n, n, alpha) == 1.0
    assert cp_upper(0, n, alpha) == pytest.approx(1 - alpha ** (1 / n), rel=1e-12)  # 0.2589
    assert cp_upper(0, n, alpha) == pytest.approx(0.258866, abs=1e-6)
    assert cp_lower(n, n, alpha) == pytest.approx(alpha ** (1 / n), rel=1e-12)  # 0.7411
    assert clopper_pearson(0, n, alpha) == (0.0, pytest.approx(1 - (alpha / 2) ** (1 / n), rel=1e-12))
    assert clopper_pearson(4, 10, alpha) == (cp_lower(4, 10, alpha / 2), cp_upper(4, 10, alpha / 2))


@pytest.mark.parametrize(("k", "n", "alpha"), [(-1, 10, 0.05), (11, 10, 0.05), (0, 0, 0.05), (1, 10, 0.0)])
def test_clopper_pearson_refuses_impossible_counts(k, n, alpha):
    with pytest.raises(ValueError, match=r"invalid|need 0 <= k <= n"):
        cp_upper(k, n, alpha)


def test_epsilon_lower_bound_is_the_hypothesis_testing_formula():
    assert epsilon_lower_bound(0.1, 0.2, DELTA) == pytest.approx(math.log((1 - DELTA - 0.2) / 0.1), rel=1e-15)
    assert epsilon_lower_bound(0.01, 0.5, 0.0) == pytest.approx(math.log(50.0), rel=1e-15)
    assert epsilon_lower_bound(0.5, 0.5, DELTA) == 0.0, "a coin flip shows nothing (clipped at 0)"
    assert epsilon_lower_bound(0.3, 0.9, DELTA) == 0.0, "worse than chance: clipped at 0"
    assert epsilon_lower_bound(0.2, 1 - DELTA, DELTA) == 0.0, "no power left after delta"
    assert epsilon_lower_bound(0.0, 0.1, DELTA) == math.inf
    with pytest.raises(ValueError, match=r"fpr=1\.5 is invalid"):
        epsilon_lower_bound(1.5, 0.1, DELTA)


def test_a_test_bounds_epsilon_from_clopper_pearson_upper_bounds_of_both_rates():
    scores_in = np.array([5.0, 6.0, 7.0, 0.0])  # one miss
    scores_out = np.array([1.0, 2.0, 6.5, 3.0, 4.0])  # one false positive
    test = ThresholdTest(4.5, above=True, positive="in")
    assert test.errors(scores_in, scores_out) == (1, 5, 1, 4)
    expected = epsilon_lower_bound(cp_upper(1, 5, 0.025), cp_upper(1, 4, 0.025), DELTA)
    assert test.epsilon_bound(scores_in, scores_out, DELTA, 0.05) == expected
    swapped = ThresholdTest(4.5, above=False, positive="out")  # "out" on score < 4.5: the same errors
    assert swapped.errors(scores_in, scores_out) == (1, 4, 1, 5)


def test_best_test_separates_hand_made_scores():
    scores_in, scores_out = np.arange(5.0, 9.0), np.arange(1.0, 5.0)
    test, bound = best_test(scores_in, scores_out, DELTA, 0.05)
    assert (test.threshold, test.above, test.positive) == (4.5, True, "in")
    assert bound == pytest.approx(audit_ceiling(4, 4, DELTA, 0.05), rel=1e-12), "perfect separation"

    test, _ = best_test(scores_out, scores_in, DELTA, 0.05)  # members now score lower
    assert test.threshold == 4.5
    assert test.errors(scores_out, scores_in) == (0, 4, 0, 4)


def test_best_test_picks_the_threshold_that_tolerates_an_outlier():
    scores_in = np.array([10.0, 11, 12, 13, 14, 15, 16, 17, 0.0])  # one member scores like a non-member
    scores_out = np.arange(1.0, 10.0)
    test, bound = best_test(scores_in, scores_out, DELTA, 0.05)
    assert (test.threshold, test.above, test.positive) == (9.5, True, "in")
    assert bound == epsilon_lower_bound(cp_upper(0, 9, 0.025), cp_upper(1, 9, 0.025), DELTA)
    assert best_test(np.ones(5), np.ones(5), DELTA, 0.05)[1] == 0.0, "identical scores show nothing"


def gaussian_mechanism(sigma: float) -> Callable[[bool, int], float]:
    """train_and_score of the Gaussian mechanism on a scalar count: f(D) = 1 with the canary, 0 without
    (sensitivity 1), released with N(0, sigma^2); the score is the release."""

    def train_and_score(include_canary: bool, seed: int) -> float:
        return float(include_canary) + sigma * np.random.default_rng(seed).standard_normal()

    return train_and_score


def test_the_audit_of_a_gaussian_mechanism_stays_below_its_exact_epsilon_and_sees_the_signal():
    sigma = 1.0
    true_epsilon = gaussian_mechanism_epsilon(DELTA, sigma, 1.0)  # 4.38
    done: list[int] = []
    audit = run_canary_audit(gaussian_mechanism(sigma), runs=400, delta=DELTA, on_progress=done.append)
    assert done == list(range(1, 401))
    assert len(audit.scores_in) == len(audit.scores_out) == 400 and audit.selection == 200
    assert 0.3 < audit.epsilon_lb < true_epsilon
    assert audit.epsilon_lb <= audit.ceiling
    assert audit.ceiling == pytest.approx(audit_ceiling(200, 200, DELTA, 0.05))


def test_the_audit_refutes_a_mechanism_that_claims_more_noise_than_it_adds():
    claimed = gaussian_mechanism_epsilon(DELTA, 4.0, 1.0)  # the claim of sigma = 4
    audit = run_canary_audit(gaussian_mechanism(0.05), runs=200, delta=DELTA)  # but sigma = 0.05
    assert audit.epsilon_lb > claimed
    assert audit.epsilon_lb == pytest.approx(audit.ceiling), "no noise to speak of: perfect separation"


def test_a_pure_noise_mechanism_shows_no_privacy_loss():
    audit = run_canary_audit(lambda include_canary, seed: float(np.random.default_rng(seed).normal()), 200, DELTA)
    assert audit.epsilon_lb < 0.5
