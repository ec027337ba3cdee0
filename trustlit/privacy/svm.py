"""Linear multi-class SVMs as regularised ERM, their exact solvers, sensitivities and DP releases.

**Crammer–Singer (all-in-one) SVM.** With W ∈ R^{c×d} (row w_k scores class k), rows
||x_i|| ≤ 1 and labels y_i ∈ {0, …, c−1}:

    F(W) = λ/2 ||W||_F² + (1/n) Σ_i ℓ(W; x_i, y_i),
    ℓ(W; x, y) = max(0, 1 + max_{k≠y} w_k·x − w_y·x) = max_k (m_k + w_k·x) − w_y·x,

with m_k = 1 for k ≠ y and m_y = 0. There is no bias: a bias needs a constant feature, which
then counts toward ||x|| ≤ 1 (and is regularised like any weight). This is the all-in-one SVM
whose private release the PMSVM paper studies (Park, Choi & Lee, "Multi-Class Support Vector
Machine with Differential Privacy", NeurIPS 2025, arXiv:2510.04027): every sample enters one
optimisation once, instead of c times for one-vs-rest.

:func:`fit_crammer_singer` solves F exactly (to ``tol``) with liblinear's dual coordinate
descent for Crammer–Singer (scikit-learn's ``LinearSVC(multi_class="crammer_singer")``), which
minimises ½||W||² + C Σ_i ℓ_i, i.e. F scaled by n·C, for C = 1/(nλ). Two details keep it the
same problem for every input: a class absent from the data (c is public and fixed) is passed to
liblinear as one all-zero row, whose loss is the constant 1 whatever W, so the minimiser is
unchanged; and for c = 2 scikit-learn returns only w_1 − w_0, while the minimiser is
antisymmetric (the loss depends on w_1 − w_0 only, and ||w_0||² + ||w_1||² is smallest at
w_0 = −w_1), so W = [−u/2; u/2].

**Output-perturbation sensitivity** (:func:`crammer_singer_sensitivity`). ℓ is a maximum of
functions affine in W whose gradients x (e_k − e_y)ᵀ have Frobenius norm √2 ||x|| (0 for
k = y), so ℓ is L-Lipschitz in W with L = √2 when ||x|| ≤ 1. Let D, D' differ in one sample,
W = argmin F_D, W' = argmin F_{D'}, and G = F_{D'} − F_D = (1/n)(ℓ(·; z') − ℓ(·; z)), which is
(2L/n)-Lipschitz. F_D and F_{D'} are λ-strongly convex, so
F_D(W') ≥ F_D(W) + λ/2 ||W' − W||² and F_{D'}(W) ≥ F_{D'}(W') + λ/2 ||W' − W||²; adding them,

    λ ||W' − W||² ≤ G(W) − G(W') ≤ (2L/n) ||W' − W||   ⇒   ||W − W'||_F ≤ 2L/(nλ) = 2√2/(nλ)

(the argument of Chaudhuri, Monteleoni & Sarwate, JMLR 2011, Corollary 8, in Frobenius
norm). The authors' released code (github.com/JinseongP/private_multiclass_svm,
``main-sklearn.py``) uses 4√2·C with LinearSVC's C = 1/(nλ), i.e. 4√2/(nλ): twice this
bound, so it is valid but adds twice the noise needed. Their one-vs-rest baseline likewise uses
4C = 4/(nλ) where 2/(nλ) suffices. (We could read the paper's abstract and code, not the
theorem's text: if the paper states 2√2/(nλ), the factor 2 is in the code only.)
``tests/test_pmsvm.py`` checks the bound on adversarial neighbouring datasets.

**One-vs-rest baseline** (:func:`fit_one_vs_rest`, :func:`release_one_vs_rest`): c binary SVMs
min_w λ/2 ||w||² + (1/n) Σ_i max(0, 1 − t_i w·x_i), t_i = ±1 for "class k or not". The binary
hinge is 1-Lipschitz in w (||x|| ≤ 1), so each has sensitivity 2/(nλ); each of the c releases
gets (ε/c, δ/c) (basic composition), as in the DP-SVM baselines of the paper. (Releasing the c
rows jointly — L2 sensitivity 2√c/(nλ) with the whole (ε, δ) — would need less noise; the
paper's point is the budget split, which we reproduce.)

**Smoothed loss for gradient perturbation** (:func:`smoothed_crammer_singer_loss`): the
log-sum-exp ("softmax") smoothing of the max with temperature h,

    ℓ_h(s, y) = h · log Σ_k exp((m_k + s_k − s_y) / h),    s = W x,

which satisfies ℓ ≤ ℓ_h ≤ ℓ + h log c, tends to ℓ as h → 0, has gradient
∇_s ℓ_h = p − e_y (p = softmax((m + s)/h)) with ||p − e_y|| ≤ √2 (so it is √2-Lipschitz in
W, like ℓ) and is (1/(2h))-smooth in s. With h = 1 and no margin (m = 0) it is the softmax
cross-entropy, which the authors' released gradient-perturbation code trains (with an M³SVM
pairwise regulariser, Nie et al., AAAI 2024, instead of λ||W||²).
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from typing import Literal

import numpy as np
import torch
from sklearn.exceptions import ConvergenceWarning
from sklearn.svm import LinearSVC

from trustlit.privacy.mechanisms import add_gaussian_noise, analytic_gaussian_sigma, classic_gaussian_sigma

ROW_NORM_TOLERANCE = 1e-6
Calibration = Literal["analytic", "classic"]


def _as_numpy(value: np.ndarray | torch.Tensor) -> np.ndarray:
    if isinstance(value, torch.Tensor):
        value = value.detach().cpu().numpy()
    return np.asarray(value)


def _check_problem(X, y, num_classes: int, lam: float) -> tuple[np.ndarray, np.ndarray]:
    X = _as_numpy(X).astype(np.float64, copy=False)
    y = _as_numpy(y)
    if X.ndim != 2 or len(X) == 0:
        raise ValueError(f"X must be a non-empty 2-D array [n, d], got shape {X.shape}")
    if y.shape != (len(X),):
        raise ValueError(f"y must have shape ({len(X)},) to match X, got {y.shape}")
    if not np.issubdtype(y.dtype, np.integer):
        raise ValueError(f"y must hold integer class labels, got dtype {y.dtype}")
    if num_classes < 2:
        raise ValueError(f"num_classes must be >= 2, got {num_classes}")
    if y.min() < 0 or y.max() >= num_classes:
        raise ValueError(
            f"labels must lie in [0, {num_classes - 1}] (num_classes={num_classes}), got [{y.min()}, {y.max()}]"
        )
    if not (math.isfinite(lam) and lam > 0):
        raise ValueError(f"lam (λ) must be a finite number > 0, got {lam}")
    return X, y.astype(np.int64)


def check_row_norms(X: np.ndarray | torch.Tensor, tolerance: float = ROW_NORM_TOLERANCE) -> float:
    """Return the largest row norm of ``X``; raise if a row has ||x|| > 1 + ``tolerance``.

    The sensitivities here assume ||x|| ≤ 1 for every row.
    """
    norms = np.linalg.norm(_as_numpy(X).astype(np.float64, copy=False), axis=1)
    largest = float(norms.max()) if norms.size else 0.0
    if largest > 1 + tolerance:
        raise ValueError(
            f"a training row has L2 norm {largest:.6g} > 1: the DP sensitivity assumes ||x|| <= 1 for every row. "
            'Bound the rows, e.g. TabularDataModule(row_norm="clip") or TabularDataModule(row_norm="normalize")'
        )
    return largest


def crammer_singer_objective(W, X, y, lam: float) -> float:
    """F(W) = λ/2 ||W||_F² + (1/n) Σ_i max(0, 1 + max_{k≠y_i} w_k·x_i − w_{y_i}·x_i)."""
    W = _as_numpy(W).astype(np.float64, copy=False)
    X, y = _check_problem(X, y, W.shape[0], lam)
    scores = X @ W.T
    rows = np.arange(len(y))
    true = scores[rows, y]
    shifted = scores + 1.0
    shifted[rows, y] = true  # m_y = 0
    return 0.5 * lam * float(np.sum(W * W)) + float(np.mean(shifted.max(axis=1) - true))


def _liblinear(X: np.ndarray, labels: np.ndarray, C: float, tol: float, max_iter: int, **kwargs) -> np.ndarray:
    model = LinearSVC(C=C, fit_intercept=False, tol=tol, max_iter=max_iter, random_state=0, **kwargs)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        try:
            model.fit(X, labels)
        except ConvergenceWarning as error:
            raise RuntimeError(
                f"the SVM solver did not reach tol={tol} in max_iter={max_iter} iterations; the DP sensitivity "
                "assumes the exact minimiser: raise max_iter"
            ) from error
    return model.coef_


def fit_crammer_singer(X, y, num_classes: int, lam: float, tol: float = 1e-10, max_iter: int = 1_000_000) -> np.ndarray:
    """argmin_W F(W) (see the module docstring), as a float64 array [num_classes, d].

    Solved by liblinear's Crammer–Singer dual coordinate descent with C = 1/(nλ) to tolerance
    ``tol``; raises RuntimeError if it does not converge in ``max_iter`` passes.
    """
    X, y = _check_problem(X, y, num_classes, lam)
    n = len(y)
    absent = np.setdiff1d(np.arange(num_classes), y)
    # an all-zero row has constant loss 1: it adds the absent class without moving the minimiser
    X_fit = np.vstack([X, np.zeros((len(absent), X.shape[1]))])
    y_fit = np.concatenate([y, absent])
    coef = _liblinear(X_fit, y_fit, 1.0 / (n * lam), tol, max_iter, multi_class="crammer_singer")
    if num_classes == 2:  # scikit-learn returns u = w_1 − w_0; the minimiser is [−u/2; u/2]
        return np.vstack([-coef / 2, coef / 2])
    return np.array(coef, dtype=np.float64)


def crammer_singer_sensitivity(n: int, lam: float) -> float:
    """L2 (Frobenius) sensitivity 2L/(nλ) = 2√2/(nλ) of argmin F under replace-one neighbours.

    L = √2 is the Lipschitz constant of the Crammer–Singer hinge in W for ||x|| ≤ 1; see the
    module docstring for the derivation and the comparison with the paper's code (4√2/(nλ)).
    """
    if n < 1:
        raise ValueError(f"n must be a positive integer, got {n}")
    if not (math.isfinite(lam) and lam > 0):
        raise ValueError(f"lam (λ) must be a finite number > 0, got {lam}")
    return 2.0 * math.sqrt(2.0) / (n * lam)


def binary_hinge_objective(w, X, t, lam: float) -> float:
    """λ/2 ||w||² + (1/n) Σ_i max(0, 1 − t_i w·x_i) for t_i ∈ {−1, +1}."""
    w, X, t = (_as_numpy(v).astype(np.float64, copy=False) for v in (w, X, t))
    return 0.5 * lam * float(w @ w) + float(np.mean(np.maximum(0.0, 1.0 - t * (X @ w))))


def fit_binary_hinge_svm(X, t, lam: float, tol: float = 1e-10, max_iter: int = 1_000_000) -> np.ndarray:
    """argmin_w of :func:`binary_hinge_objective` (liblinear's L1-loss dual solver, C = 1/(nλ))."""
    X = _as_numpy(X).astype(np.float64, copy=False)
    t = _as_numpy(t).astype(np.float64, copy=False)
    if X.ndim != 2 or len(X) == 0 or t.shape != (len(X),):
        raise ValueError(f"need X [n, d] and t [n], got shapes {X.shape} and {t.shape}")
    if not np.all(np.abs(t) == 1):
        raise ValueError("binary targets t must be -1 or +1")
    if not (math.isfinite(lam) and lam > 0):
        raise ValueError(f"lam (λ) must be a finite number > 0, got {lam}")
    n = len(t)
    # a missing sign gets an all-zero row (constant loss 1): liblinear needs both, the minimiser is unchanged
    missing = [s for s in (-1.0, 1.0) if not np.any(t == s)]
    X_fit = np.vstack([X, np.zeros((len(missing), X.shape[1]))])
    t_fit = np.concatenate([t, missing])
    coef = _liblinear(X_fit, t_fit, 1.0 / (n * lam), tol, max_iter, loss="hinge", dual=True)
    return np.array(coef[0], dtype=np.float64)  # coef_ scores the class +1


def fit_one_vs_rest(X, y, num_classes: int, lam: float, tol: float = 1e-10, max_iter: int = 1_000_000) -> np.ndarray:
    """Row k: the binary hinge SVM of "class k (t = +1) versus the rest (t = −1)", [num_classes, d]."""
    X, y = _check_problem(X, y, num_classes, lam)
    return np.stack(
        [fit_binary_hinge_svm(X, np.where(y == k, 1.0, -1.0), lam, tol, max_iter) for k in range(num_classes)]
    )


def one_vs_rest_sensitivity(n: int, lam: float) -> float:
    """L2 sensitivity 2/(nλ) of one binary hinge SVM (1-Lipschitz loss, ||x|| ≤ 1)."""
    return crammer_singer_sensitivity(n, lam) / math.sqrt(2.0)


@dataclass(frozen=True)
class SVMRelease:
    """Released weights and the parameters of the Gaussian mechanism that produced them.

    ``sigma`` and ``sensitivity`` are per release: for one-vs-rest, per binary classifier,
    each run at ``(epsilon / c, delta / c)``; ``epsilon`` and ``delta`` are the totals.
    """

    weights: np.ndarray
    sigma: float
    sensitivity: float
    epsilon: float
    delta: float


def release_crammer_singer(
    X, y, num_classes: int, lam: float, epsilon: float, delta: float, generator=None
) -> SVMRelease:
    """PMSVM-WP: argmin F plus N(0, σ² I), σ the analytic Gaussian σ for Δ = 2√2/(nλ).

    ``generator``: a numpy Generator, an int seed or None (fresh entropy), see
    :func:`~trustlit.privacy.mechanisms.add_gaussian_noise`. Rows must satisfy ||x|| ≤ 1.
    """
    X, y = _check_problem(X, y, num_classes, lam)
    check_row_norms(X)
    sensitivity = crammer_singer_sensitivity(len(y), lam)
    sigma = analytic_gaussian_sigma(epsilon, delta, sensitivity)
    weights = fit_crammer_singer(X, y, num_classes, lam)
    return SVMRelease(add_gaussian_noise(weights, sigma, generator), sigma, sensitivity, float(epsilon), float(delta))


def release_one_vs_rest(
    X,
    y,
    num_classes: int,
    lam: float,
    epsilon: float,
    delta: float,
    calibration: Calibration = "analytic",
    generator=None,
) -> SVMRelease:
    """c binary SVMs, each plus N(0, σ² I) calibrated for (ε/c, δ/c) and Δ = 2/(nλ).

    ``calibration``: ``analytic`` (Balle & Wang) or ``classic`` (σ = Δ sqrt(2 ln(1.25/δ))/ε,
    a proof for ε/c < 1 only).
    """
    X, y = _check_problem(X, y, num_classes, lam)
    check_row_norms(X)
    if calibration not in ("analytic", "classic"):
        raise ValueError(f"calibration must be 'analytic' or 'classic', got '{calibration}'")
    calibrate = analytic_gaussian_sigma if calibration == "analytic" else classic_gaussian_sigma
    sensitivity = one_vs_rest_sensitivity(len(y), lam)
    sigma = calibrate(epsilon / num_classes, delta / num_classes, sensitivity)
    weights = fit_one_vs_rest(X, y, num_classes, lam)
    return SVMRelease(add_gaussian_noise(weights, sigma, generator), sigma, sensitivity, float(epsilon), float(delta))


def crammer_singer_hinge(scores: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Per-sample ℓ = max_k (m_k + s_k) − s_y for scores s = W x, shape [B]."""
    margins = torch.ones_like(scores).scatter(1, y[:, None], 0.0)
    return (scores + margins).amax(dim=1) - scores.gather(1, y[:, None]).squeeze(1)


def crammer_singer_margins(scores: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Per-sample margin s_y − max_{k≠y} s_k for scores s = W x, shape [B] (the hinge is active below 1)."""
    others = scores.scatter(1, y[:, None], float("-inf"))
    return scores.gather(1, y[:, None]).squeeze(1) - others.amax(dim=1)


def smoothed_crammer_singer_loss(scores: torch.Tensor, y: torch.Tensor, smoothing: float) -> torch.Tensor:
    """Per-sample ℓ_h = h · logsumexp((m + s)/h) − s_y, the log-sum-exp smoothed CS hinge, shape [B].

    ``smoothing`` is h > 0; ℓ ≤ ℓ_h ≤ ℓ + h log c (see the module docstring).
    """
    if not smoothing > 0:
        raise ValueError(f"smoothing (h) must be > 0, got {smoothing}")
    margins = torch.ones_like(scores).scatter(1, y[:, None], 0.0)
    return smoothing * torch.logsumexp((scores + margins) / smoothing, dim=1) - scores.gather(1, y[:, None]).squeeze(1)
