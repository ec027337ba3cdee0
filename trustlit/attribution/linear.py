"""The marginal (linear) baseline of ProxySPEX: LASSO on uniformly sampled masks, and the faithfulness of any
additive explanation measured the way ProxySPEX's is.

Butler, Agarwal, Kang, Erginbas, Yu, Ramchandran, "ProxySPEX: Inference-Efficient Interpretability via Sparse
Feature Interactions in LLMs" (NeurIPS 2025, arXiv 2505.17495) compare against LASSO, the marginal attribution that
their +20 % faithfulness claim is measured against; its released form is the SPEX code (basics-lab/spectral-explain,
``fit_regression('lasso', ...)`` over the order-<=1 frequencies): scikit-learn's ``LassoCV`` (5-fold
cross-validated penalty) on the Fourier basis of the empty set and the n singletons, fitted on uniform masks.

With masks ``x`` in {0,1}^n (1 = player present) the fitted game is

    f(x) = F[∅] + sum_i F[i] (1 - 2 x_i),
    F = argmin_F  1/(2m) sum_j (v(x_j) - f(x_j))^2 + alpha * sum_i |F[i]|      (alpha by 5-fold CV)

and, in the Möbius basis, a[∅] = F[∅] + sum_i F[i], a[i] = -2 F[i]: an additive game, whose Shapley and Banzhaf
values are both a[i]. One difference from the released code: there the constant is a penalised column of ones
(``fit_intercept=False``), which shrinks it and lifts the smallest penalty on the path for a game with a large mean
(log-probabilities near -30); here F[∅] is an unpenalised intercept.

Faithfulness is R^2 on held-out uniform masks, as for :func:`proxyspex`; with the same ``seed`` and ``budget`` both
draw the same training and held-out masks (:func:`holdout_masks`), so their faithfulness is measured on one set.
:func:`additive_faithfulness` scores an additive explanation such as KernelSHAP's, the game v(∅) + sum_{i in x} phi_i,
on those masks.

Notes: docs/methods/proxyspex.md
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch

from trustlit.attribution.fourier import (
    Coefficients,
    fourier_basis,
    fourier_to_mobius,
    mobius_game,
)
from trustlit.attribution.proxy_spex import (
    CV_FOLDS,
    InteractionResult,
    draw_masks,
    evaluate,
    min_budget,
    r_squared,
)
from trustlit.attribution.shapley import ShapleyResult

Game = Callable[[torch.Tensor], torch.Tensor]


def players_of(value: Game) -> int:
    """``value.n_players`` as a positive int; a one-line error otherwise."""
    n = getattr(value, "n_players", None)
    if not isinstance(n, int) or n < 1:
        raise ValueError(f"value function: n_players={n!r}; expected a positive int attribute")
    return n


def holdout_masks(n: int, budget: int, n_holdout: int = 10_000, seed: int = 0) -> torch.Tensor:
    """The held-out masks on which ``proxyspex`` and ``lasso_attribution`` with this budget and seed score R^2."""
    return draw_masks(n, budget, n_holdout, seed)[1]


def lasso_attribution(
    value: Game,
    budget: int,
    *,
    seed: int = 0,
    n_holdout: int = 10_000,
    n_alphas: int = 100,
    batch_size: int = 256,
) -> InteractionResult:
    """LASSO over the constant and the n first-order Fourier terms, fitted on ``budget`` distinct uniform masks.

    The penalty is chosen by 5-fold cross-validation over ``n_alphas`` values on scikit-learn's path (its defaults,
    as in the released SPEX baseline); the constant is an unpenalised intercept. Returns the order-1 Möbius
    coefficients and the empty set, Shapley values equal to the first-order coefficients, and R^2 on ``n_holdout``
    held-out uniform masks (not counted in ``n_evaluations``).
    """
    from sklearn.linear_model import LassoCV

    n = players_of(value)
    if not isinstance(budget, int) or budget < min_budget(n):
        raise ValueError(f"budget={budget!r}; LASSO needs at least {min_budget(n)} evaluations for n={n} players")
    if n_holdout < 2:
        raise ValueError(f"n_holdout={n_holdout}; expected at least 2 held-out masks for R^2")
    if n_alphas < 1:
        raise ValueError(f"n_alphas={n_alphas}; expected a positive number of penalties on the path")
    masks, holdout = draw_masks(n, budget, n_holdout, seed)
    values = evaluate(value, masks, batch_size)
    singletons = [frozenset([i]) for i in range(n)]
    basis = fourier_basis(singletons, masks).numpy()
    lasso = LassoCV(alphas=n_alphas, cv=CV_FOLDS, max_iter=10_000, n_jobs=1).fit(basis, values.numpy())
    fourier: Coefficients = {frozenset(): float(lasso.intercept_)}
    fourier.update({k: float(c) for k, c in zip(singletons, lasso.coef_, strict=True)})
    mobius = fourier_to_mobius(fourier)
    # an additive game: its Shapley and Banzhaf values are both its first-order coefficients a[i] = -2 F[i]
    first_order = torch.as_tensor(-2.0 * lasso.coef_, dtype=torch.float64)
    return InteractionResult(
        mobius,
        first_order,
        r_squared(evaluate(value, holdout, batch_size), mobius_game(mobius, holdout)),
        int(masks.shape[0]),
        n,
        fourier,
        first_order.clone(),
        n_holdout,
        {"alpha": float(lasso.alpha_), "nonzero": int(np.count_nonzero(lasso.coef_))},
    )


def additive_game(result: ShapleyResult) -> Coefficients:
    """The Möbius coefficients of the additive game of a Shapley explanation: a[∅] = v(∅), a[i] = phi_i."""
    return {frozenset(): float(result.empty_value), **{frozenset([i]): float(p) for i, p in enumerate(result.values)}}


def additive_faithfulness(result: ShapleyResult, value: Game, holdout: torch.Tensor, batch_size: int = 256) -> float:
    """R^2 of the additive game v(∅) + sum_{i in x} phi_i against ``value`` on the ``holdout`` masks [B, n]."""
    n = players_of(value)
    if result.values.shape != (n,):
        raise ValueError(f"result.values has shape {tuple(result.values.shape)}; expected ({n},) for n_players={n}")
    if holdout.ndim != 2 or holdout.shape[1] != n or holdout.shape[0] < 2:
        raise ValueError(f"holdout has shape {tuple(holdout.shape)}; expected [B >= 2, {n}]")
    return r_squared(evaluate(value, holdout, batch_size), mobius_game(additive_game(result), holdout))


__all__ = ["additive_faithfulness", "additive_game", "holdout_masks", "lasso_attribution"]
