"""Ridge regression with the regulariser chosen by K-fold cross-validation, one alpha per target, as himalaya's
``RidgeCV`` (the solver of Cammarota et al., NeurIPS 2025, footnote 1; Dupré la Tour et al. 2022).

For X [n, p] and Y [n, t], on each of K contiguous folds (scikit-learn's unshuffled ``KFold``, himalaya's ``cv=5``)
the training rows are centred (X_c, Y_c, the fold's training means; the validation rows by the same means), and with
the thin SVD X_c = U diag(s) V^T the ridge predictions of the validation rows X_v for every alpha come at once:

    Y^_v(alpha) = X_v V diag(s / (s^2 + alpha)) U^T Y_c,

then the validation score is himalaya's default ``score_func`` (``l2_neg_loss``), the negative mean squared error
per target, -mean_i (Y_v - Y^_v(alpha))^2, averaged over the folds. Each target takes the alpha of its best mean
score (``per_target=True``, himalaya's ``local_alpha``) or all targets the alpha of the best score averaged over
targets (``per_target=False``); exact ties go to the larger alpha. The refit on all rows uses one SVD of the centred
X for every distinct chosen alpha: W[:, j] = V diag(s / (s^2 + alpha_j)) U^T Y_c[:, j], b = mean(Y) - mean(X) W.
The thin SVD has min(n, p) components, so n < p (voxels) costs an n x n problem, never a p x p one.

Notes: docs/methods/semantic_bottleneck.md
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
from sklearn.linear_model import RidgeCV
from sklearn.model_selection import KFold

Selection = Literal["kfold_per_target", "loo_per_target", "kfold_shared"]
SELECTIONS: tuple[str, ...] = ("kfold_per_target", "loo_per_target", "kfold_shared")


@dataclass(frozen=True)
class RidgeSolution:
    """A fitted ridge: ``coef`` [p, t], ``intercept`` [t], the chosen ``alphas`` [t], and ``shared`` when one alpha
    was chosen for all targets."""

    coef: np.ndarray
    intercept: np.ndarray
    alphas: np.ndarray
    shared: bool

    def predict(self, x: np.ndarray) -> np.ndarray:
        return x @ self.coef + self.intercept


def check_alphas(alphas: Sequence[float], name: str) -> tuple[float, ...]:
    values = tuple(float(a) for a in np.atleast_1d(np.asarray(alphas, dtype=np.float64)))
    if not values or min(values) <= 0 or not all(np.isfinite(values)):
        raise ValueError(f"{name}={list(alphas)!r} is invalid, expected a non-empty list of numbers > 0")
    return values


def check_cv(cv: int) -> int:
    if isinstance(cv, bool) or not isinstance(cv, int) or cv < 2:
        raise ValueError(f"cv={cv!r} is invalid, expected an integer number of folds >= 2")
    return cv


def check_selection(selection: str) -> str:
    if selection not in SELECTIONS:
        raise ValueError(f"selection={selection!r} is invalid, expected one of {', '.join(map(repr, SELECTIONS))}")
    return selection


def _shrunk_solutions(x_c: np.ndarray, y_c: np.ndarray, grid: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The thin SVD's ingredients of every ridge on the centred (x_c, y_c): V [p, r] and the shrunk projections
    diag(s / (s^2 + alpha)) U^T y_c per alpha, [A, r, t]."""
    u, s, vt = np.linalg.svd(x_c, full_matrices=False)
    shrink = s / (s**2 + grid[:, None])  # [A, r]; s = 0 (rank deficiency) gives 0, never a division by zero
    return vt.T, shrink[:, :, None] * (u.T @ y_c)[None]


def kfold_scores(x: np.ndarray, y: np.ndarray, grid: np.ndarray, cv: int) -> np.ndarray:
    """The negative validation MSE of every alpha and target, averaged over ``cv`` contiguous folds, [A, t]."""
    scores = np.zeros((len(grid), y.shape[1]))
    for train, valid in KFold(cv).split(x):
        x_mean, y_mean = x[train].mean(0), y[train].mean(0)
        v, projections = _shrunk_solutions(x[train] - x_mean, y[train] - y_mean, grid)
        predicted = ((x[valid] - x_mean) @ v)[None] @ projections  # [A, n_valid, t]
        scores -= np.square((y[valid] - y_mean)[None] - predicted).mean(1)
    return scores / cv


def best_alpha_indices(scores: np.ndarray, per_target: bool) -> np.ndarray:
    """argmax over the (ascending) grid of the mean scores [A, t], per target or of their mean over targets; the
    reversed argmax sends exact ties to the larger alpha (himalaya: a 1e-10 log(alpha) slope)."""
    if per_target:
        return len(scores) - 1 - np.argmax(scores[::-1], axis=0)
    mean = scores.mean(1)
    return np.full(scores.shape[1], len(mean) - 1 - np.argmax(mean[::-1]))


def refit(x: np.ndarray, y: np.ndarray, alphas: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Ridge coefficients [p, t] and intercepts [t] on all rows, target j with ``alphas[j]``: one SVD, one product per
    distinct alpha."""
    x_mean, y_mean = x.mean(0), y.mean(0)
    distinct, which = np.unique(alphas, return_inverse=True)
    v, projections = _shrunk_solutions(x - x_mean, y - y_mean, distinct)
    coef = v @ projections[which, :, np.arange(y.shape[1])].T  # column j from its own alpha's projection
    return coef, y_mean - x_mean @ coef


def kfold_ridge(
    x: np.ndarray, y: np.ndarray, alphas: Sequence[float], cv: int = 5, *, per_target: bool = True
) -> RidgeSolution:
    """Ridge of ``y`` [n, t] on ``x`` [n, p] with intercept, alpha chosen from ``alphas`` by ``cv``-fold CV per target
    (himalaya's ``RidgeCV``) or shared (``per_target=False``, himalaya's ``local_alpha=False``); module docstring."""
    grid = np.sort(np.asarray(check_alphas(alphas, "alphas")))
    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    if x.ndim != 2 or y.ndim != 2 or len(x) != len(y):
        raise ValueError(f"x {x.shape} and y {y.shape} must be 2-D with one row per sample each")
    if len(x) < check_cv(cv):
        raise ValueError(f"cv={cv} folds need at least {cv} samples, got {len(x)}")
    chosen = grid[best_alpha_indices(kfold_scores(x, y, grid, cv), per_target)]
    coef, intercept = refit(x, y, chosen)
    return RidgeSolution(coef, intercept, chosen, shared=not per_target)


def fit_ridge(x: np.ndarray, y: np.ndarray, alphas: Sequence[float], cv: int, selection: Selection) -> RidgeSolution:
    """The ridge of ``y`` on ``x`` with its alpha(s) chosen by ``selection``: ``kfold_per_target`` (the paper's:
    :func:`kfold_ridge`), ``kfold_shared`` (one alpha, ``cv``-fold), ``loo_per_target`` (scikit-learn's ``RidgeCV``
    with its efficient leave-one-out CV, ``cv`` unused). A single alpha is a plain ridge (no CV)."""
    grid = np.asarray(check_alphas(alphas, "alphas"))
    check_selection(selection)
    if len(grid) == 1:
        coef, intercept = refit(np.asarray(x, np.float64), np.asarray(y, np.float64), np.repeat(grid, y.shape[1]))
        return RidgeSolution(coef, intercept, np.repeat(grid, y.shape[1]), shared=True)
    if selection == "loo_per_target":
        model = RidgeCV(alphas=grid, alpha_per_target=True).fit(x, y)
        return RidgeSolution(model.coef_.T, model.intercept_, np.broadcast_to(model.alpha_, y.shape[1]), False)
    return kfold_ridge(x, y, grid, cv, per_target=selection == "kfold_per_target")
