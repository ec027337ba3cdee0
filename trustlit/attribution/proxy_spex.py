"""ProxySPEX: sparse Möbius interactions of a game through a gradient-boosted-tree proxy.

Butler, Agarwal, Kang, Erginbas, Yu, Ramchandran, "ProxySPEX: Inference-Efficient Interpretability via
Sparse Feature Interactions in LLMs" (NeurIPS 2025, arXiv 2505.17495); released code in mmschlk/shapiq
(``approximator/proxy/proxyspex.py``). Notes: docs/methods/proxyspex.md. The exact transforms live in
:mod:`trustlit.attribution.fourier`; this module is not named ``proxyspex`` so that the package attribute
``trustlit.attribution.proxyspex`` stays the function, whatever was imported first.

With masks ``x`` in {0,1}^n (1 = player present) the game is written in the Fourier (Walsh) basis

    f(x) = sum_k F[k] * (-1)^{<x, k>}          (k a subset of players, <x, k> = |x ∩ k|)

and, since (-1)^{<x, k>} = prod_{i in k} (1 - 2 x_i), in the Möbius basis

    f(x) = sum_T a[T] * prod_{i in T} x_i,     a[T] = (-2)^{|T|} * sum_{k ⊇ T} F[k].

Steps: draw ``budget`` distinct uniform masks and query the game; fit a LightGBM regressor (grid search
by 5-fold cross-validated R^2 over depth, trees and learning rate, as released); convert every tree
exactly to Fourier coefficients by recursion over its splits (a split on player j with children L, R
gives F[k] = (L[k] + R[k]) / 2 and F[k ∪ j] = (L[k] - R[k]) / 2) and sum over trees; keep the
coefficients holding ``energy`` (95 %) of the non-constant energy sum_k F[k]^2; refit those by ridge
regression with a leave-one-out-chosen penalty on the sampled masks; convert to Möbius. Shapley values
phi_i = sum_{T ∋ i} a[T] / |T|, Banzhaf values beta_i = sum_{T ∋ i} a[T] / 2^{|T| - 1}, Shapley
interaction indices I[S] = sum_{T ⊇ S} a[T] / (|T| - |S| + 1) and Banzhaf interaction indices
sum_{T ⊇ S} a[T] / 2^{|T| - |S|}. Faithfulness is the R^2 of the reconstructed game on held-out uniform
masks, which (as in the paper) are not counted in ``n_evaluations``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from trustlit.attribution.fourier import (
    Coefficients,
    banzhaf_interaction_index,
    booster_to_fourier,
    fourier_basis,
    fourier_to_mobius,
    mobius_game,
    mobius_to_banzhaf,
    mobius_to_shapley,
    shapley_interaction_index,
)

RELEASED_GRID: dict[str, list[Any]] = {"max_depth": [3, 5], "n_estimators": [500, 1000], "learning_rate": [0.01, 0.1]}
RIDGE_ALPHAS = np.logspace(-6, 6, 100)  # as released
CV_FOLDS = 5  # as released


@dataclass(frozen=True)
class InteractionResult:
    """Sparse Möbius coefficients of a game, its Shapley values, and how well they reconstruct it.

    ``faithfulness`` is R^2 on ``n_holdout_evaluations`` held-out uniform masks; ``n_evaluations``
    counts the distinct masks the fit used (held-out ones excluded).
    """

    mobius: Coefficients
    shapley: torch.Tensor
    faithfulness: float
    n_evaluations: int
    n_players: int
    fourier: Coefficients = field(repr=False)
    banzhaf: torch.Tensor = field(repr=False)
    n_holdout_evaluations: int = 0
    proxy_params: dict[str, Any] = field(default_factory=dict)

    def __call__(self, masks: torch.Tensor) -> torch.Tensor:
        """The reconstructed game on ``masks`` [B, n]."""
        return mobius_game(self.mobius, masks)

    def shapley_interactions(self, order: int = 2) -> Coefficients:
        """Shapley interaction indices of every coalition of size ``order``."""
        return shapley_interaction_index(self.mobius, self.n_players, order)

    def banzhaf_interactions(self, order: int = 2) -> Coefficients:
        """Banzhaf interaction indices of every coalition of size ``order``."""
        return banzhaf_interaction_index(self.mobius, self.n_players, order)


def top_energy(fourier: Mapping[frozenset[int], float], energy: float = 0.95) -> list[frozenset[int]]:
    """The fewest largest non-constant coefficients whose squares reach ``energy`` of the total, plus the constant."""
    if not 0.0 < energy <= 1.0:
        raise ValueError(f"energy={energy}; expected 0 < energy <= 1")
    ranked = sorted((k for k in fourier if k), key=lambda k: -(fourier[k] ** 2))
    squares = np.array([fourier[k] ** 2 for k in ranked])
    total = squares.sum()
    if total == 0.0:
        return [frozenset()]
    count = int(np.searchsorted(np.cumsum(squares) / total, energy * (1 - 1e-12))) + 1
    return [frozenset(), *ranked[:count]]


def refine_fourier(keys: list[frozenset[int]], masks: torch.Tensor, values: torch.Tensor) -> Coefficients:
    """Refit the Fourier coefficients on ``keys`` by ridge with leave-one-out-chosen penalty, as released."""
    from sklearn.linear_model import RidgeCV

    basis = fourier_basis(keys, masks).numpy()
    ridge = RidgeCV(alphas=RIDGE_ALPHAS, fit_intercept=False).fit(basis, values.to(torch.float64).numpy())
    return {k: float(c) for k, c in zip(keys, ridge.coef_, strict=True)}


def fit_proxy(masks: torch.Tensor, values: torch.Tensor, *, grid: Mapping[str, list[Any]], seed: int) -> Any:
    """LightGBM regressor chosen by 5-fold cross-validated R^2 over ``grid``; returns the refit best model."""
    import lightgbm as lgb
    from sklearn.model_selection import GridSearchCV

    base = lgb.LGBMRegressor(random_state=seed, n_jobs=1, verbose=-1)
    search = GridSearchCV(base, param_grid=dict(grid), scoring="r2", cv=CV_FOLDS, n_jobs=1)
    search.fit(masks.to(torch.float64).numpy(), values.to(torch.float64).numpy())
    return search.best_estimator_


def r_squared(truth: torch.Tensor, estimate: torch.Tensor) -> float:
    """1 - sum (y - y_hat)^2 / sum (y - mean y)^2."""
    truth, estimate = truth.to(torch.float64), estimate.to(torch.float64)
    residual = ((truth - estimate) ** 2).sum()
    spread = ((truth - truth.mean()) ** 2).sum()
    return float(1.0 - residual / spread) if spread > 0 else float("nan")


def distinct_uniform_masks(n: int, count: int, generator: torch.Generator) -> torch.Tensor:
    """``min(count, 2^n)`` distinct masks drawn uniformly from {0,1}^n (duplicates redrawn)."""
    count = min(count, 2**n) if n < 63 else count
    seen: dict[bytes, torch.Tensor] = {}
    while len(seen) < count:
        draw = torch.randint(0, 2, (2 * (count - len(seen)) + 8, n), generator=generator, dtype=torch.bool)
        for row in draw:
            seen.setdefault(row.numpy().tobytes(), row)
            if len(seen) == count:
                break
    return torch.stack(list(seen.values()))


def evaluate(value: Callable[[torch.Tensor], torch.Tensor], masks: torch.Tensor, batch_size: int) -> torch.Tensor:
    """The game on ``masks`` in batches, each output checked to be a finite [B] vector."""
    out = []
    for start in range(0, masks.shape[0], batch_size):
        chunk = masks[start : start + batch_size]
        result = torch.as_tensor(value(chunk))
        if result.shape != (chunk.shape[0],):
            raise ValueError(
                f"value function: returned shape {tuple(result.shape)} for {chunk.shape[0]} masks; "
                f"expected ({chunk.shape[0]},)"
            )
        if not torch.isfinite(result).all():
            raise ValueError("value function: returned non-finite values; expected finite floats")
        out.append(result.detach().to(torch.float64).cpu())
    return torch.cat(out)


def draw_masks(n: int, budget: int, n_holdout: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The ``budget`` distinct training masks and the ``n_holdout`` held-out uniform masks of ``seed`` (one generator,
    training masks first): every method given the same budget and seed fits and is scored on the same masks."""
    generator = torch.Generator().manual_seed(seed)
    masks = distinct_uniform_masks(n, budget, generator)
    return masks, torch.randint(0, 2, (n_holdout, n), generator=generator, dtype=torch.bool)


def min_budget(n: int) -> int:
    """Fewest evaluations proxyspex accepts: n + 1, and two per cross-validation fold."""
    return max(n + 1, 2 * CV_FOLDS)


def proxyspex(
    value: Callable[[torch.Tensor], torch.Tensor],
    budget: int,
    *,
    seed: int = 0,
    n_holdout: int = 10_000,
    energy: float = 0.95,
    grid: Mapping[str, list[Any]] | None = None,
    batch_size: int = 256,
) -> InteractionResult:
    """Sparse Möbius interactions of ``value`` from ``budget`` distinct uniform masks (see the module docstring).

    ``grid`` defaults to the released LightGBM grid (``RELEASED_GRID``); ``n_holdout`` uniform masks
    (not counted in ``n_evaluations``) measure faithfulness.
    """
    n = getattr(value, "n_players", None)
    if not isinstance(n, int) or n < 1:
        raise ValueError(f"value function: n_players={n!r}; expected a positive int attribute")
    if not isinstance(budget, int) or budget < min_budget(n):
        raise ValueError(f"budget={budget!r}; ProxySPEX needs at least {min_budget(n)} evaluations for n={n} players")
    if n_holdout < 2:
        raise ValueError(f"n_holdout={n_holdout}; expected at least 2 held-out masks for R^2")
    masks, holdout = draw_masks(n, budget, n_holdout, seed)
    values = evaluate(value, masks, batch_size)
    proxy = fit_proxy(masks, values, grid=RELEASED_GRID if grid is None else grid, seed=seed)
    keys = top_energy(booster_to_fourier(proxy.booster_), energy)
    fourier = refine_fourier(keys, masks, values)
    mobius = fourier_to_mobius(fourier)
    faithfulness = r_squared(evaluate(value, holdout, batch_size), mobius_game(mobius, holdout))
    return InteractionResult(
        mobius=mobius,
        shapley=mobius_to_shapley(mobius, n),
        faithfulness=faithfulness,
        n_evaluations=int(masks.shape[0]),
        n_players=n,
        fourier=fourier,
        banzhaf=mobius_to_banzhaf(mobius, n),
        n_holdout_evaluations=n_holdout,
        proxy_params={k: proxy.get_params()[k] for k in (grid or RELEASED_GRID)},
    )


__all__ = ["RELEASED_GRID", "InteractionResult", "min_budget", "proxyspex", "refine_fourier", "top_energy"]
