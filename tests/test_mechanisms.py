from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy.integrate import quad
from scipy.special import ndtr
from scipy.stats import norm

from trustlit.privacy.mechanisms import (
    add_gaussian_noise,
    analytic_gaussian_sigma,
    classic_gaussian_sigma,
    gaussian_mechanism_delta,
    gaussian_mechanism_epsilon,
)

EPSILONS = [0.01, 0.1, 0.3, 0.5, 1.0, 2.0, 5.0, 10.0]
DELTAS = [1e-10, 1e-5, 1e-2, 0.3]


def balle_wang_algorithm_1(epsilon: float, delta: float, sensitivity: float) -> float:
    """An independent, literal port of Balle & Wang (2018), Algorithm 1: bisection on v with B+/B-."""

    def b_plus(v: float) -> float:
        return ndtr(math.sqrt(epsilon * v)) - math.exp(epsilon) * ndtr(-math.sqrt(epsilon * (v + 2)))

    def b_minus(u: float) -> float:
        return ndtr(-math.sqrt(epsilon * u)) - math.exp(epsilon) * ndtr(-math.sqrt(epsilon * (u + 2)))

    delta_0 = ndtr(0.0) - math.exp(epsilon) * ndtr(-math.sqrt(2 * epsilon))
    if delta >= delta_0:  # v* = sup{v >= 0 : B+(v) <= delta}, B+ increasing
        low, high = 0.0, 1.0
        while b_plus(high) <= delta:
            low, high = high, 2 * high
        for _ in range(200):
            mid = (low + high) / 2
            low, high = (mid, high) if b_plus(mid) <= delta else (low, mid)
        v = low
        alpha = math.sqrt(1 + v / 2) - math.sqrt(v / 2)
    else:  # u* = inf{u >= 0 : B-(u) <= delta}, B- decreasing
        low, high = 0.0, 1.0
        while b_minus(high) > delta:
            low, high = high, 2 * high
        for _ in range(200):
            mid = (low + high) / 2
            low, high = (low, mid) if b_minus(mid) <= delta else (mid, high)
        u = high
        alpha = math.sqrt(1 + u / 2) + math.sqrt(u / 2)
    return alpha * sensitivity / math.sqrt(2 * epsilon)


def hockey_stick_delta(epsilon: float, sigma: float, sensitivity: float) -> float:
    """delta = integral of max(0, p(x) - e^eps q(x)), p = N(0, sigma^2), q = N(sensitivity, sigma^2), by quadrature."""
    crossing = sensitivity / 2 - epsilon * sigma**2 / sensitivity

    def integrand(x: float) -> float:
        return max(0.0, norm.pdf(x, 0, sigma) - math.exp(epsilon) * norm.pdf(x, sensitivity, sigma))

    value, _ = quad(integrand, crossing - 40 * sigma, crossing, epsabs=0, epsrel=1e-12, limit=500)
    return value


def test_classic_sigma_is_the_closed_form():
    assert classic_gaussian_sigma(1.0, 1e-5, 1.0) == pytest.approx(math.sqrt(2 * math.log(1.25e5)), rel=1e-15)
    assert classic_gaussian_sigma(1.0, 1e-5, 1.0) == pytest.approx(4.8448, abs=1e-4)
    assert classic_gaussian_sigma(0.5, 1e-3, 3.0) == pytest.approx(3 * math.sqrt(2 * math.log(1250)) / 0.5, rel=1e-15)


def test_analytic_sigma_known_value_is_tight():
    sigma = analytic_gaussian_sigma(1.0, 1e-5, 1.0)
    # the value of Balle & Wang's calibration at eps=1, delta=1e-5, sensitivity 1, checked by the exact delta
    assert sigma == pytest.approx(3.7306316, abs=1e-7)
    assert gaussian_mechanism_delta(1.0, sigma, 1.0) == pytest.approx(1e-5, rel=1e-9)
    assert gaussian_mechanism_delta(1.0, sigma * (1 - 1e-6), 1.0) > 1e-5


@pytest.mark.parametrize("epsilon", EPSILONS)
def test_analytic_sigma_matches_balle_wang_algorithm_1(epsilon):
    for delta in DELTAS:
        ours, reference = analytic_gaussian_sigma(epsilon, delta, 1.0), balle_wang_algorithm_1(epsilon, delta, 1.0)
        assert ours == pytest.approx(reference, rel=1e-6), (epsilon, delta)


@pytest.mark.parametrize(("epsilon", "sigma", "sensitivity"), [(0.5, 2.0, 1.0), (1.0, 1.5, 2.0), (3.0, 0.4, 1.0)])
def test_exact_delta_equals_the_hockey_stick_divergence(epsilon, sigma, sensitivity):
    assert gaussian_mechanism_delta(epsilon, sigma, sensitivity) == pytest.approx(
        hockey_stick_delta(epsilon, sigma, sensitivity), rel=1e-7
    )


def test_exact_delta_at_zero_epsilon_is_the_total_variation():
    sigma, sensitivity = 2.0, 1.5
    assert gaussian_mechanism_delta(0.0, sigma, sensitivity) == pytest.approx(
        2 * ndtr(sensitivity / (2 * sigma)) - 1, rel=1e-12
    )


def test_analytic_sigma_is_below_classic_for_epsilon_up_to_one():
    for epsilon in np.linspace(0.01, 1.0, 25):
        for delta in (1e-8, 1e-5, 1e-3):
            analytic, classic = (
                analytic_gaussian_sigma(epsilon, delta, 1.0),
                classic_gaussian_sigma(epsilon, delta, 1.0),
            )
            assert analytic < classic, (epsilon, delta, analytic, classic)


@pytest.mark.parametrize("epsilon", EPSILONS)
def test_analytic_calibration_is_tight(epsilon):
    for delta in DELTAS:
        sigma = analytic_gaussian_sigma(epsilon, delta, 1.0)
        achieved = gaussian_mechanism_delta(epsilon, sigma, 1.0)
        assert achieved <= delta, "the returned sigma must never be on the unsafe side"
        assert achieved == pytest.approx(delta, rel=1e-9), (epsilon, delta)
        assert gaussian_mechanism_delta(epsilon, 0.99 * sigma, 1.0) > delta


def test_sigma_is_linear_in_the_sensitivity():
    for calibrate in (analytic_gaussian_sigma, classic_gaussian_sigma):
        base = calibrate(0.7, 1e-6, 1.0)
        for sensitivity in (1e-3, 0.25, 7.5, 1e4):
            assert calibrate(0.7, 1e-6, sensitivity) == pytest.approx(sensitivity * base, rel=1e-12)


def test_huge_epsilon_gives_a_tiny_finite_sigma():
    sigma = analytic_gaussian_sigma(1e6, 1e-5, 1.0)
    assert 0 < sigma < 1e-3
    assert gaussian_mechanism_delta(1e6, sigma, 1.0) <= 1e-5
    # Balle & Wang: sigma = alpha * sensitivity / sqrt(2 eps) with alpha -> 1 as eps grows
    assert 1.0 < sigma * math.sqrt(2e6) < 1.01


@pytest.mark.parametrize("calibrate", [analytic_gaussian_sigma, classic_gaussian_sigma])
@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((0.0, 1e-5, 1.0), "epsilon must be a finite number > 0"),
        ((-1.0, 1e-5, 1.0), "epsilon must be a finite number > 0"),
        ((math.nan, 1e-5, 1.0), "epsilon must be a finite number > 0"),
        ((1.0, 0.0, 1.0), r"delta must lie in the open interval \(0, 1\)"),
        ((1.0, 1.0, 1.0), r"delta must lie in the open interval \(0, 1\)"),
        ((1.0, -0.1, 1.0), r"delta must lie in the open interval \(0, 1\)"),
        ((1.0, 1e-5, 0.0), "sensitivity must be a finite number > 0"),
        ((1.0, 1e-5, -2.0), "sensitivity must be a finite number > 0"),
    ],
)
def test_bad_input_is_refused_naming_the_argument(calibrate, args, message):
    with pytest.raises(ValueError, match=message):
        calibrate(*args)


def test_exact_delta_refuses_bad_input():
    with pytest.raises(ValueError, match="sigma must be a finite number > 0"):
        gaussian_mechanism_delta(1.0, 0.0, 1.0)
    with pytest.raises(ValueError, match="epsilon must be a finite number >= 0"):
        gaussian_mechanism_delta(-1.0, 1.0, 1.0)


def test_gaussian_noise_on_arrays_and_tensors():
    array = np.full((200, 500), 3.0, dtype=np.float32)
    noisy = add_gaussian_noise(array, 2.0, np.random.default_rng(0))
    assert isinstance(noisy, np.ndarray) and noisy.dtype == np.float32 and noisy.shape == array.shape
    assert np.all(array == 3.0), "the input must not be modified"
    assert noisy.mean() == pytest.approx(3.0, abs=0.02)
    assert noisy.std() == pytest.approx(2.0, rel=0.01)
    np.testing.assert_array_equal(add_gaussian_noise(array, 2.0, 5), add_gaussian_noise(array, 2.0, 5))

    tensor = torch.zeros(200, 500, dtype=torch.float64)
    noisy_tensor = add_gaussian_noise(tensor, 0.5, torch.Generator().manual_seed(0))
    assert isinstance(noisy_tensor, torch.Tensor) and noisy_tensor.dtype == torch.float64
    assert noisy_tensor.std().item() == pytest.approx(0.5, rel=0.01)
    assert torch.equal(add_gaussian_noise(tensor, 0.5, 7), add_gaussian_noise(tensor, 0.5, 7))
    assert not torch.equal(add_gaussian_noise(tensor, 0.5, 7), add_gaussian_noise(tensor, 0.5, 8))
    assert torch.equal(add_gaussian_noise(tensor, 0.0, 1), tensor)


def test_gaussian_noise_refuses_bad_input():
    with pytest.raises(ValueError, match="sigma must be a finite number >= 0"):
        add_gaussian_noise(np.zeros(3), -1.0)
    with pytest.raises(TypeError, match=r"numpy\.random\.Generator"):
        add_gaussian_noise(np.zeros(3), 1.0, torch.Generator())
    with pytest.raises(TypeError, match=r"torch\.Generator"):
        add_gaussian_noise(torch.zeros(3), 1.0, np.random.default_rng(0))


@pytest.mark.parametrize("epsilon", [0.1, 1.0, 5.0])
@pytest.mark.parametrize("delta", [1e-5, 1e-2])
def test_gaussian_mechanism_epsilon_inverts_the_exact_delta(epsilon, delta):
    sigma = analytic_gaussian_sigma(epsilon, delta, 1.0)  # the sigma at which (epsilon, delta) is tight
    assert gaussian_mechanism_epsilon(delta, sigma, 1.0) == pytest.approx(epsilon, rel=1e-6)
    found = gaussian_mechanism_epsilon(delta, 2.0, 3.0)
    assert gaussian_mechanism_delta(found, 2.0, 3.0) == pytest.approx(delta, rel=1e-6)


def test_gaussian_mechanism_epsilon_matches_gaussian_dp_closed_form():
    mu, delta = 1.7, 1e-5  # mu-GDP: delta(eps) = Phi(mu/2 - eps/mu) - e^eps Phi(-mu/2 - eps/mu)
    epsilon = gaussian_mechanism_epsilon(delta, 1.0, mu)
    closed = norm.cdf(mu / 2 - epsilon / mu) - math.exp(epsilon) * norm.cdf(-mu / 2 - epsilon / mu)
    assert closed == pytest.approx(delta, rel=1e-6)
    assert gaussian_mechanism_epsilon(0.5, 100.0, 1.0) == 0.0, "delta(0) <= delta: no epsilon is spent"
