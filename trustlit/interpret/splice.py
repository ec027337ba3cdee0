"""SpLiCE: an embedding as a sparse non-negative combination of concept embeddings.

Bhalla, Oesterling, Srinivas, Calmon, Lakkaraju, "Interpreting CLIP with Sparse Linear Concept Embeddings
(SpLiCE)" (NeurIPS 2024, arXiv 2402.10376; code AI4LIFE-GROUP/SpLiCE). With unit-norm embeddings ``e``
[N, D], the embedding mean ``mu`` (SpLiCE's image mean), and concept embeddings ``g`` [C, D],

    v = normalize(normalize(e) - mu)                              centred targets [N, D]
    G = normalize(normalize(g) - mean_c normalize(g))             centred dictionary [C, D]
    w = argmin_{w >= 0}  ||v - w G||_2^2 + l1 ||w||_1              sparse weights [N, C]

solved, as released, by ADMM on the split ``x = z`` with penalty ``rho``:

    x <- (2 G G^T + rho I)^{-1} (2 G v^T + rho (z - u))           (Cholesky factor computed once)
    z <- max(x + u - l1 / rho, 0)
    u <- u + x - z

stopping when every column's primal ``||x - z||`` and dual ``||rho (z - z_old)||`` residuals are below ``tol``;
the weights are ``z``. The reconstruction is ``normalize(normalize(w G) + mu)``. Defaults as in the released
``SPLICE`` module's ADMM: ``rho = 5``, ``tol = 1e-6``, ``max_iter = 2000``; ``mu`` defaults to the mean of the
given unit-norm embeddings (the release ships a precomputed MSCOCO image mean per CLIP model).

The sparsity is set by ``l1``; :func:`l1_for_sparsity` finds, by bisection on ``log l1``, the penalty whose mean
number of non-zero weights per embedding is a given target (to compare methods at matched sparsity). The upper
end is ``l1_max = max 2 G v``: at and above it every weight is zero (the zero vector meets the optimality
condition ``2 G v <= l1``).

Notes: docs/methods/splice.md
"""

from __future__ import annotations

import numpy as np
import torch

from trustlit.privacy.mechanisms import check_positive

Array = np.ndarray | torch.Tensor


def _as_matrix(values: Array, name: str) -> torch.Tensor:
    matrix = torch.as_tensor(np.asarray(values) if not isinstance(values, torch.Tensor) else values)
    if matrix.ndim != 2 or matrix.shape[0] == 0 or not torch.isfinite(matrix).all():
        raise ValueError(f"{name} must be a finite [rows, dim] matrix with at least one row, got {tuple(matrix.shape)}")
    return matrix.detach().to(torch.float64)


def _normalize(matrix: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.normalize(matrix, dim=-1)


def embedding_mean(embeddings: Array) -> torch.Tensor:
    """``mu``: the mean of the unit-normalised embeddings (SpLiCE's image mean, computed on the given set)."""
    return _normalize(_as_matrix(embeddings, "embeddings")).mean(dim=0)


def center_concepts(concept_embeddings: Array) -> torch.Tensor:
    """The centred dictionary ``G = normalize(normalize(g) - mean normalize(g))`` [C, D]."""
    concepts = _normalize(_as_matrix(concept_embeddings, "concept_embeddings"))
    return _normalize(concepts - concepts.mean(dim=0))


def admm(
    dictionary: torch.Tensor,
    targets: torch.Tensor,
    l1: float,
    *,
    rho: float = 5.0,
    tol: float = 1e-6,
    max_iter: int = 2000,
) -> torch.Tensor:
    """``argmin_{w >= 0} ||v - w G||^2 + l1 ||w||_1`` for every row ``v`` of ``targets``: weights [N, C]."""
    count = dictionary.shape[0]
    factor = torch.linalg.cholesky(2 * dictionary @ dictionary.T + rho * torch.eye(count, dtype=dictionary.dtype))
    linear = 2 * dictionary @ targets.T  # [C, N]
    # zeros rather than the release's random start: the problem is convex, the optimum is the same
    z = torch.zeros_like(linear)
    u = torch.zeros_like(linear)
    for _ in range(max_iter):
        x = torch.cholesky_solve(linear + rho * (z - u), factor)
        z_old, z = z, torch.clamp(x + u - l1 / rho, min=0)
        u = u + x - z
        primal = torch.linalg.norm(x - z, dim=0).max()
        dual = torch.linalg.norm(rho * (z - z_old), dim=0).max()
        if primal < tol and dual < tol:
            break
    return z.T


def centred_problem(
    embeddings: Array, concept_embeddings: Array, mean: Array | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """The centred targets ``v`` [N, D] and dictionary ``G`` [C, D] that SpLiCE's ADMM solves for (module docstring)."""
    vectors = _as_matrix(embeddings, "embeddings")
    dictionary = center_concepts(concept_embeddings)
    if vectors.shape[1] != dictionary.shape[1]:
        raise ValueError(
            f"embeddings have dimension {vectors.shape[1]} but concept_embeddings {dictionary.shape[1]}: "
            "both must come from the same encoder"
        )
    mu = embedding_mean(vectors) if mean is None else _as_matrix(torch.as_tensor(mean).reshape(1, -1), "mean")[0]
    return _normalize(_normalize(vectors) - mu), dictionary


def splice(
    embeddings: Array,
    concept_embeddings: Array,
    l1: float,
    *,
    mean: Array | None = None,
    rho: float = 5.0,
    tol: float = 1e-6,
    max_iter: int = 2000,
) -> Array:
    """SpLiCE weights [N, C] (module docstring) of ``embeddings`` [N, D] over ``concept_embeddings`` [C, D]:
    non-negative, sparse; numpy in, numpy out; torch in, torch out. ``mean``: ``mu`` [D], default the
    embeddings' own mean (:func:`embedding_mean`); pass zeros to only normalise."""
    if not isinstance(l1, int | float) or not np.isfinite(l1) or l1 < 0:
        raise ValueError(f"l1={l1!r} is invalid, expected a finite number >= 0")
    rho, tol = check_positive("rho", rho), check_positive("tol", tol)
    if not isinstance(max_iter, int) or max_iter < 1:
        raise ValueError(f"max_iter={max_iter!r} is invalid, expected an integer >= 1")
    targets, dictionary = centred_problem(embeddings, concept_embeddings, mean)
    weights = admm(dictionary, targets, float(l1), rho=rho, tol=tol, max_iter=max_iter)
    if isinstance(embeddings, torch.Tensor):
        return weights.to(embeddings.dtype if embeddings.is_floating_point() else torch.float32)
    return weights.numpy().astype(np.float32)


def recompose(weights: Array, concept_embeddings: Array, mean: Array) -> torch.Tensor:
    """SpLiCE's reconstruction ``normalize(normalize(w G) + mu)`` [N, D] of weights [N, C]."""
    dictionary = center_concepts(concept_embeddings)
    combination = _as_matrix(weights, "weights") @ dictionary
    return _normalize(_normalize(combination) + torch.as_tensor(mean, dtype=torch.float64).reshape(1, -1))


def mean_nonzeros(weights: Array) -> float:
    """The mean number of non-zero weights per row (SpLiCE's l0 sparsity)."""
    return float((torch.as_tensor(weights) > 0).sum(dim=1).double().mean())


def l1_for_sparsity(
    embeddings: Array,
    concept_embeddings: Array,
    target: float,
    *,
    mean: Array | None = None,
    tol: float = 0.05,
    max_steps: int = 30,
    rho: float = 5.0,
    admm_tol: float = 1e-6,
    max_iter: int = 2000,
) -> tuple[float, float]:
    """The ``l1`` at which :func:`splice` gives ``target`` non-zero weights per embedding on average, by bisection
    on ``log l1`` between ``l1_max * 1e-6`` and ``l1_max`` (module docstring), until the mean count is within
    ``tol`` of ``target`` or ``max_steps`` solves were made; ``(l1, mean count)`` of the closest solve.
    ``rho``, ``admm_tol``, ``max_iter``: :func:`splice`'s ``rho``, ``tol``, ``max_iter``."""
    count = _as_matrix(concept_embeddings, "concept_embeddings").shape[0]
    if not isinstance(target, int | float) or not 0 < target < count:
        raise ValueError(f"target={target!r} is invalid, expected a number in (0, {count}) (the concepts)")
    tol, rho, admm_tol = check_positive("tol", tol), check_positive("rho", rho), check_positive("admm_tol", admm_tol)
    for name, value in (("max_steps", max_steps), ("max_iter", max_iter)):
        if not isinstance(value, int) or value < 1:
            raise ValueError(f"{name}={value!r} is invalid, expected an integer >= 1")
    targets, dictionary = centred_problem(embeddings, concept_embeddings, mean)
    high = float((2 * targets @ dictionary.T).max())
    low, best = high * 1e-6, (high, 0.0)
    for _ in range(max_steps):
        l1 = float(np.sqrt(low * high))
        found = mean_nonzeros(admm(dictionary, targets, l1, rho=rho, tol=admm_tol, max_iter=max_iter))
        if abs(found - target) < abs(best[1] - target):
            best = (l1, found)
        if abs(found - target) <= tol:
            break
        low, high = (l1, high) if found > target else (low, l1)
    return best
