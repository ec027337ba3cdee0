"""The Gaussian mechanism: noise calibration (classic and analytic) and its exact delta.

A query f with L2 sensitivity Δ = max_{D ~ D'} ||f(D) − f(D')||_2 (D, D' neighbouring
datasets) is released as M(D) = f(D) + N(0, σ² I). Two calibrations of σ for (ε, δ)-DP:

- **Classic** (Dwork & Roth 2014, Theorem A.1): σ = Δ · sqrt(2 ln(1.25 / δ)) / ε. The proof
  holds for ε < 1 only; for ε ≥ 1 the formula is still widely used but is not a proof of
  (ε, δ)-DP there. It is also loose: it overestimates σ for every ε.
- **Analytic** (Balle & Wang, "Improving the Gaussian Mechanism for Differential Privacy:
  Analytical Calibration and Optimal Denoising", ICML 2018, Theorem 8 and Algorithm 1): the
  Gaussian mechanism is (ε, δ)-DP **if and only if**

      δ(ε, σ) = Φ(Δ/(2σ) − εσ/Δ) − e^ε Φ(−Δ/(2σ) − εσ/Δ) ≤ δ,

  with Φ the standard normal CDF. δ(ε, σ) decreases strictly in σ, so the smallest valid σ
  is the root of δ(ε, σ) = δ; it is valid for every ε > 0 and is smaller than the classic σ.

Balle & Wang find the root by a doubling-and-bisection search on a reparametrisation
(v with σ = αΔ/sqrt(2ε), α = sqrt(1 + v/2) ∓ sqrt(v/2), through their functions B⁺/B⁻).
:func:`analytic_gaussian_sigma` solves the same equation directly in log σ with Brent's
method, evaluating log δ(ε, σ) with ``scipy.special.log_ndtr`` so that e^ε never overflows
(ε = 10⁶ works) and tiny δ keeps its relative precision; the root is then nudged upwards until
δ(ε, σ) ≤ δ holds in floating point, so the returned σ is never on the unsafe side.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from scipy.optimize import brentq
from scipy.special import log_ndtr


def check_positive(name: str, value: float) -> float:
    """``value`` as a float if it is finite and > 0, else a ValueError naming ``name``."""
    value = float(value)
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"{name} must be a finite number > 0, got {value}")
    return value


def check_delta(delta: float) -> float:
    """``delta`` as a float if it lies in (0, 1), else a ValueError."""
    delta = float(delta)
    if not 0 < delta < 1:
        raise ValueError(f"delta must lie in the open interval (0, 1), got {delta}")
    return delta


def classic_gaussian_sigma(epsilon: float, delta: float, sensitivity: float) -> float:
    """σ = Δ · sqrt(2 ln(1.25 / δ)) / ε, the classic Gaussian mechanism (Dwork & Roth 2014).

    A proof of (ε, δ)-DP for ε < 1 only; returned for ε ≥ 1 too, as commonly used (e.g. by
    the DP-SVM baselines the PMSVM paper compares with), but there it is not a guarantee:
    prefer :func:`analytic_gaussian_sigma`, which is exact for every ε.

    Raises:
        ValueError: epsilon <= 0, delta outside (0, 1) or sensitivity <= 0.
    """
    epsilon = check_positive("epsilon", epsilon)
    delta = check_delta(delta)
    sensitivity = check_positive("sensitivity", sensitivity)
    return sensitivity * math.sqrt(2.0 * math.log(1.25 / delta)) / epsilon


def _log_delta(epsilon: float, sigma_over_sensitivity: float) -> float:
    """log δ(ε, σ) for the Gaussian mechanism, as a function of t = σ / Δ (see the module docstring)."""
    a = 0.5 / sigma_over_sensitivity  # Δ / (2σ)
    b = epsilon * sigma_over_sensitivity  # εσ / Δ
    log_first = float(log_ndtr(a - b))
    log_second = epsilon + float(log_ndtr(-a - b))  # log(e^ε Φ(−a − b)) without overflowing e^ε
    # δ = e^{log_first} (1 − e^{log_second − log_first}); log_second < log_first mathematically
    gap = log_second - log_first
    if gap >= 0:  # only reachable through rounding when δ underflows relative to its terms
        return -math.inf
    return log_first + math.log(-math.expm1(gap))


def gaussian_mechanism_delta(epsilon: float, sigma: float, sensitivity: float) -> float:
    """The exact δ at ``epsilon`` of the Gaussian mechanism with noise ``sigma`` and sensitivity Δ.

        δ(ε, σ) = Φ(Δ/(2σ) − εσ/Δ) − e^ε Φ(−Δ/(2σ) − εσ/Δ)    (Balle & Wang 2018, Theorem 8)

    The mechanism is (ε, δ')-DP exactly for δ' ≥ δ(ε, σ). ``epsilon`` may be 0 here.
    """
    epsilon = float(epsilon)
    if not (math.isfinite(epsilon) and epsilon >= 0):
        raise ValueError(f"epsilon must be a finite number >= 0, got {epsilon}")
    sigma = check_positive("sigma", sigma)
    sensitivity = check_positive("sensitivity", sensitivity)
    return math.exp(_log_delta(epsilon, sigma / sensitivity))


def gaussian_mechanism_epsilon(delta: float, sigma: float, sensitivity: float) -> float:
    """The exact ε at ``delta`` of the Gaussian mechanism: the smallest ε >= 0 with δ(ε, σ) <= δ.

    δ(ε, σ) decreases in ε (formula in :func:`gaussian_mechanism_delta`), so ε is its root; 0 when
    δ(0, σ) <= δ already. With μ = Δ/σ this is the ε of a μ-Gaussian-DP mechanism (e.g. T
    full-batch DP-SGD steps with noise multiplier σ have μ = sqrt(T)/σ).
    """
    delta = check_delta(delta)
    t = check_positive("sigma", sigma) / check_positive("sensitivity", sensitivity)
    log_target = math.log(delta)

    def excess(epsilon: float) -> float:  # log δ(ε, σ) − log δ, decreasing in ε
        return _log_delta(epsilon, t) - log_target

    if excess(0.0) <= 0:
        return 0.0
    high = 1.0
    while excess(high) > 0:
        high *= 2.0
    return brentq(excess, 0.0, high, xtol=1e-12, maxiter=1000)


def analytic_gaussian_sigma(epsilon: float, delta: float, sensitivity: float, tol: float = 1e-12) -> float:
    """The smallest σ with δ(ε, σ) ≤ δ: the analytic Gaussian mechanism (Balle & Wang 2018, Alg. 1).

    Args:
        epsilon: ε > 0 (any size: the calibration is exact, not only for ε < 1).
        delta: δ in (0, 1).
        sensitivity: the L2 sensitivity Δ > 0; σ is exactly linear in Δ.
        tol: relative tolerance on σ of the root-finding (absolute on log σ).

    Returns:
        σ such that δ(ε, σ) ≤ δ, within a relative ``tol`` of the exact root.

    Raises:
        ValueError: epsilon <= 0, delta outside (0, 1), sensitivity <= 0 or tol not in (0, 0.1).
    """
    epsilon = check_positive("epsilon", epsilon)
    delta = check_delta(delta)
    sensitivity = check_positive("sensitivity", sensitivity)
    if not 0 < tol < 0.1:
        raise ValueError(f"tol must lie in (0, 0.1), got {tol}")
    log_target = math.log(delta)

    def excess(log_t: float) -> float:  # log δ(ε, e^{log_t} Δ) − log δ, decreasing in log_t
        return _log_delta(epsilon, math.exp(log_t)) - log_target

    # bracket the root in u = log(σ / Δ), starting from the classic calibration's value
    start = math.log(math.sqrt(2.0 * math.log(1.25 / delta)) / epsilon)
    low, high = start - 1.0, start + 1.0
    while excess(low) < 0:
        low -= 2.0 * (start - low)
    while excess(high) > 0:
        high += 2.0 * (high - start)
    log_t = brentq(excess, low, high, xtol=tol, rtol=4 * np.finfo(float).eps, maxiter=1000)
    t = math.exp(log_t)
    # never return a σ on the unsafe side of the root
    while _log_delta(epsilon, t) > log_target:
        t *= 1.0 + tol
    return t * sensitivity


def add_gaussian_noise(
    value: torch.Tensor | np.ndarray,
    sigma: float,
    generator: torch.Generator | np.random.Generator | int | None = None,
) -> torch.Tensor | np.ndarray:
    """``value`` + N(0, σ² I), as a new tensor or array of the same type, shape and dtype.

    Args:
        value: a torch tensor (noise drawn with ``torch.randn`` on its device) or a numpy array.
        sigma: the noise standard deviation, >= 0.
        generator: a ``torch.Generator`` (tensors), a ``numpy.random.Generator`` (arrays), an
            int seed for a new one, or None for fresh OS entropy. A fixed, known seed makes the
            noise reproducible and therefore removable: use one for experiments only.
    """
    sigma = float(sigma)
    if not (math.isfinite(sigma) and sigma >= 0):
        raise ValueError(f"sigma must be a finite number >= 0, got {sigma}")
    if isinstance(value, torch.Tensor):
        if not value.is_floating_point():
            raise TypeError(f"add_gaussian_noise needs a floating-point tensor, got {value.dtype}")
        if isinstance(generator, np.random.Generator):
            raise TypeError("add_gaussian_noise: pass a torch.Generator (or an int seed) for a torch tensor")
        if generator is None or isinstance(generator, int):
            seed = generator
            generator = torch.Generator(device=value.device)
            if seed is None:
                generator.seed()
            else:
                generator.manual_seed(seed)
        noise = torch.randn(value.shape, generator=generator, device=value.device, dtype=value.dtype)
        return value + sigma * noise
    if isinstance(generator, torch.Generator):
        raise TypeError("add_gaussian_noise: pass a numpy.random.Generator (or an int seed) for a numpy array")
    array = np.asarray(value)
    if not np.issubdtype(array.dtype, np.floating):
        array = array.astype(np.float64)
    rng = generator if isinstance(generator, np.random.Generator) else np.random.default_rng(generator)
    return array + rng.normal(0.0, sigma, size=array.shape).astype(array.dtype, copy=False)
