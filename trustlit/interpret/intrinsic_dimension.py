"""Intrinsic dimension (ID) of a point cloud from nearest-neighbour distances: TwoNN, MLE and GRIDE.

Every estimator takes ``X`` ``[N, D]`` (a torch tensor or a numpy array), computes in float64, and
first removes exact duplicate rows (a zero distance has no ratio). ``r_j(i)`` is the distance from
point ``i`` to its ``j``-th nearest other point. Distances come from :func:`neighbour_distances`:
chunked float32 ``||x||^2 + ||y||^2 - 2 x.y`` with ``topk`` per chunk for the candidates, then their
distances recomputed exactly in float64 (no cancellation error), so N = 10^4 points in D = 576 take seconds.

- :func:`twonn` -- Facco, d'Errico, Rodriguez, Laio, "Estimating the intrinsic dimension of datasets by a
  minimal neighborhood information", Sci. Rep. 7, 12140 (2017). ``mu_i = r_2(i) / r_1(i)`` is Pareto,
  ``F(mu) = 1 - mu^(-d)``, so ``-log(1 - F(mu)) = d log mu``: sort the ``mu``, keep the smallest
  ``floor(N (1 - discard_fraction))``, ``F_emp(mu_(i)) = i / N``, and ``d`` is the slope of the least-squares
  line through the origin, ``d = sum x_i y_i / sum x_i^2`` with ``x = log mu``, ``y = -log(1 - F_emp)``.
- :func:`mle` -- Levina, Bickel, "Maximum likelihood estimation of intrinsic dimension", NeurIPS 2004
  (2005 proceedings), with the correction of MacKay, Ghahramani (2005, "Comments on 'Maximum likelihood
  estimation of intrinsic dimension'"): per point ``1 / m_k(i) = (1 / (k - 1)) sum_{j<k} log(r_k(i) / r_j(i))``,
  and ``d = 1 / mean_i(1 / m_k(i))`` (average the inverses, then invert). ``k - 1`` as in Levina-Bickel's
  estimator and scikit-dimension's ``MLE`` (``unbiased=False``, ``comb="mle"``); ``k - 2`` would be their
  ``unbiased=True``.
- :func:`gride` -- Denti, Doimo, Laio, Mira, "The generalized ratios intrinsic dimension estimator",
  Sci. Rep. 12, 20005 (2022), arXiv 2104.13832. ``mu_i = r_{n2}(i) / r_{n1}(i)`` has density
  ``f(mu) = d (mu^d - 1)^(n2 - n1 - 1) / (B(n2 - n1, n1) mu^((n2 - 1) d + 1))`` on ``mu > 1``; ``d`` maximises
  the log-likelihood, whose score ``(N - 1) / d + sum_i [(n2 - n1 - 1) / (1 - mu_i^-d) - (n2 - 1)] log mu_i``
  decreases in ``d``: its root is found by bisection on ``[d_min, d_max]``. As the authors' released code
  (DADApy ``return_id_scaling_gride``): ``N - 1`` in place of ``N`` (unbiased at ``n1 = 1, n2 = 2``, where
  ``d = (N - 1) / sum log mu``), ratios above ``q50 + 20 (q95 - q50)`` dropped (overlapping points), ties
  ``mu = 1`` nudged by ``10 eps`` and ``1 - mu^-d`` floored at ``2 * tolerance``.

Notes: docs/methods/intrinsic_dimension.md
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

# Rows of the distance matrix computed at once: CHUNK x N float64 (10^4 points: 80 MB).
CHUNK = 1024
# Extra float32 candidates per point re-ranked exactly; rows whose candidates are gathered at once (cache-sized).
MARGIN = 8
GATHER = 128


def as_points(X: Any, estimator: str) -> torch.Tensor:
    """``X`` as a float64 ``[N, D]`` tensor without duplicate rows; a non-2-D or non-finite input is an error."""
    points = torch.as_tensor(np.asarray(X) if not isinstance(X, torch.Tensor) else X).detach()
    if points.dim() != 2:
        raise ValueError(f"{estimator}: X must be 2-D [N points, D features], got shape {tuple(points.shape)}")
    points = points.to("cpu", torch.float64)
    if not torch.isfinite(points).all():
        raise ValueError(f"{estimator}: X holds NaN or infinite values; give finite coordinates")
    return torch.unique(points, dim=0)


def check_enough_points(points: torch.Tensor, neighbours: int, estimator: str) -> None:
    """One line naming the count when ``points`` has no ``neighbours`` other points each."""
    if len(points) < neighbours + 1:
        raise ValueError(
            f"{estimator}: needs at least {neighbours + 1} distinct points ({neighbours} neighbours each), "
            f"got {len(points)} after removing duplicates"
        )


def neighbour_distances(points: torch.Tensor, k: int, chunk_size: int = CHUNK) -> torch.Tensor:
    """``[N, k]`` ascending Euclidean distances from each point to its ``k`` nearest other points.

    Candidates come from float32 squared distances of the centred points (half the cost of float64):
    the ``k + MARGIN`` nearest per row. Their exact float64 distances (differences, no cancellation) then
    pick and order the ``k``: exact unless float32 rounding pushes a true neighbour ``MARGIN`` ranks down.
    """
    centred = (points - points.mean(dim=0)).to(torch.float32)
    squared_norms = (centred * centred).sum(dim=1)
    candidates = min(len(points) - 1, k + MARGIN)
    rows = []
    for start in range(0, len(points), chunk_size):
        chunk = centred[start : start + chunk_size]
        squared = torch.addmm(squared_norms[None, :], chunk, centred.T, alpha=-2)
        squared.add_(squared_norms[start : start + len(chunk), None])
        squared[torch.arange(len(chunk)), torch.arange(start, start + len(chunk))] = math.inf  # not its own
        nearest = squared.topk(candidates, dim=1, largest=False).indices
        rows += [
            exact_nearest(points, start + offset, nearest[offset : offset + GATHER], k)
            for offset in range(0, len(chunk), GATHER)
        ]
    return torch.cat(rows)


def exact_nearest(points: torch.Tensor, start: int, candidates: torch.Tensor, k: int) -> torch.Tensor:
    """The ``k`` smallest exact distances, ascending, from rows ``start..`` to their ``candidates`` ``[rows, c]``."""
    rows = points[start : start + len(candidates), None, :]
    return torch.linalg.vector_norm(rows - points[candidates], dim=2).topk(k, dim=1, largest=False).values


def twonn(X: Any, discard_fraction: float = 0.1) -> float:
    """TwoNN ID (Facco et al. 2017): the slope through the origin of ``-log(1 - F_emp(mu))`` on ``log mu``.

    ``discard_fraction`` of the largest ratios ``mu = r_2 / r_1`` are left out of the fit (the paper's 10 %),
    in ``(0, 1)``: the largest ratio has ``F_emp = 1`` and an infinite ``-log(1 - F_emp)``.
    """
    if not 0 < discard_fraction < 1:
        raise ValueError(f"twonn: discard_fraction={discard_fraction} is invalid, expected a number in (0, 1)")
    points = as_points(X, "twonn")
    check_enough_points(points, 2, "twonn")
    distances = neighbour_distances(points, 2)
    mu = (distances[:, 1] / distances[:, 0]).sort().values
    n = len(mu)
    keep = int(n * (1 - discard_fraction))
    if keep < 2:
        raise ValueError(
            f"twonn: discard_fraction={discard_fraction} keeps {keep} of {n} ratios, at least 2 are needed: "
            "give more points or a smaller discard_fraction"
        )
    x = mu[:keep].log()
    y = -torch.log1p(-torch.arange(1, keep + 1, dtype=torch.float64) / n)
    return float((x * y).sum() / (x * x).sum())


def mle(X: Any, k: int = 20) -> float:
    """Levina-Bickel MLE with MacKay-Ghahramani's pooling: ``1 / mean_i((1/(k-1)) sum_{j<k} log(r_k / r_j))``."""
    if not isinstance(k, int) or isinstance(k, bool) or k < 2:
        raise ValueError(f"mle: k={k!r} is invalid, expected an integer >= 2 (neighbours per point)")
    points = as_points(X, "mle")
    check_enough_points(points, k, "mle")
    distances = neighbour_distances(points, k)
    inverse = (distances[:, -1:] / distances[:, :-1]).log().sum(dim=1) / (k - 1)
    return float(1 / inverse.mean())


def gride(X: Any, n1: int = 1, n2: int = 2, d_min: float = 1e-3, d_max: float = 1e3, tolerance: float = 1e-7) -> float:
    """GRIDE ID (Denti et al. 2022): the maximum-likelihood ``d`` of the ratios ``mu = r_{n2} / r_{n1}``.

    The root of the score (module docstring) in ``[d_min, d_max]``, by bisection to ``tolerance``; the
    defaults are DADApy's ``d0``, ``d1``, ``eps``. A root beyond ``d_max`` returns ``d_max``.
    """
    if not (isinstance(n1, int) and isinstance(n2, int) and 1 <= n1 < n2):
        raise ValueError(f"gride: n1={n1!r}, n2={n2!r} are invalid, expected integers with 1 <= n1 < n2")
    if not 0 < d_min < d_max:
        raise ValueError(f"gride: d_min={d_min}, d_max={d_max} are invalid, expected 0 < d_min < d_max")
    points = as_points(X, "gride")
    check_enough_points(points, n2, "gride")
    distances = neighbour_distances(points, n2)
    mu = filter_ratios(distances[:, n2 - 1] / distances[:, n1 - 1])
    return bisect_score(mu, n1, n2, d_min, d_max, tolerance)


def filter_ratios(mu: torch.Tensor) -> torch.Tensor:
    """DADApy's filter: ties ``mu = 1`` nudged by ``10 eps``; ratios at or above ``q50 + 20 (q95 - q50)`` dropped."""
    mu = torch.where(mu == 1, mu + 10 * torch.finfo(mu.dtype).eps, mu)
    q95, q50 = torch.quantile(mu, torch.tensor([0.95, 0.5], dtype=mu.dtype))
    return mu[mu < q50 + 20 * (q95 - q50)]


def gride_score(d: float, mu: torch.Tensor, n1: int, n2: int, floor: float) -> float:
    """Minus the derivative in ``d`` of GRIDE's log-likelihood (with ``N - 1``): increasing in ``d``."""
    one_minus = (1 - mu ** (-d)).clamp_min(floor)
    return float((((n1 - n2 + 1) / one_minus + n2 - 1) * mu.log()).sum() - (len(mu) - 1) / d)


def bisect_score(mu: torch.Tensor, n1: int, n2: int, d_min: float, d_max: float, tolerance: float) -> float:
    """The root of :func:`gride_score` in ``[d_min, d_max]``, halving the bracket until narrower than ``tolerance``."""
    floor = 2 * tolerance
    high_score = gride_score(d_max, mu, n1, n2, floor)
    low, high = d_min, d_max
    while high - low > tolerance:
        middle = (low + high) / 2
        if gride_score(middle, mu, n1, n2, floor) * high_score > 0:
            high = middle
        else:
            low = middle
    return (low + high) / 2


ESTIMATORS = {"twonn": twonn, "mle": mle, "gride": gride}
