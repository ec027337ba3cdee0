"""The LASSO baseline and additive faithfulness: recovery of an additive game, its limit on an interacting game,
the closed-form R^2 of an additive explanation,
shared held-out masks with ProxySPEX, budget accounting and bad input."""

from __future__ import annotations

import pytest
import torch

from trustlit.attribution import exact_shapley, kernel_shap
from trustlit.attribution.fourier import mobius_game, mobius_to_shapley
from trustlit.attribution.linear import additive_faithfulness, additive_game, holdout_masks, lasso_attribution
from trustlit.attribution.proxy_spex import proxyspex

SMALL_GRID = {"max_depth": [3], "n_estimators": [300], "learning_rate": [0.1]}


class Planted:
    """A game with known Möbius coefficients; records every mask it is asked about."""

    def __init__(self, n: int, mobius: dict[frozenset[int], float]) -> None:
        self.n_players, self.mobius, self.seen = n, mobius, []

    def __call__(self, masks: torch.Tensor) -> torch.Tensor:
        self.seen.append(masks.clone())
        return mobius_game(self.mobius, masks)


def additive(n: int = 12) -> Planted:
    weights = [3.0, -2.0, 1.5, 0.0, 0.0, 1.0, -0.5, 0.0, 2.5, 0.0, -1.0, 0.75][:n]
    return Planted(n, {frozenset(): 4.0, **{frozenset([i]): w for i, w in enumerate(weights)}})


def pairs(n: int = 10) -> Planted:
    """f = 6 x_0 x_1 - 5 x_2 x_3 + x_4."""
    return Planted(n, {frozenset({0, 1}): 6.0, frozenset({2, 3}): -5.0, frozenset([4]): 1.0})


def exclusive_or(n: int = 10) -> Planted:
    """f = 4 XOR(x_0, x_1) + 3 XOR(x_2, x_3) + x_4, XOR(a, b) = a + b - 2ab: only x_4 is additive under uniform
    masks, so the best additive fit has R^2 = Var(x_4) / Var(f) = (1/4) / (16/4 + 9/4 + 1/4) = 1/26."""
    mobius = {frozenset([0]): 4.0, frozenset([1]): 4.0, frozenset({0, 1}): -8.0}
    mobius |= {frozenset([2]): 3.0, frozenset([3]): 3.0, frozenset({2, 3}): -6.0, frozenset([4]): 1.0}
    return Planted(n, mobius)


def all_masks(n: int) -> torch.Tensor:
    return (torch.arange(2**n)[:, None] >> torch.arange(n)) & 1 == 1


def test_lasso_recovers_an_additive_game() -> None:
    game = additive()
    result = lasso_attribution(game, 400, seed=1, n_holdout=2000)
    truth = torch.tensor([game.mobius[frozenset([i])] for i in range(game.n_players)], dtype=torch.float64)
    assert torch.allclose(result.shapley, truth, atol=0.02)
    assert torch.allclose(result.banzhaf, truth, atol=0.02)
    assert torch.allclose(result.shapley, mobius_to_shapley(result.mobius, game.n_players), atol=1e-12)
    assert result.mobius[frozenset()] == pytest.approx(4.0, abs=0.05)
    assert all(len(t) <= 1 for t in result.mobius)
    assert result.faithfulness > 0.999


def test_lasso_r2_is_far_below_proxyspex_on_interactions() -> None:
    game = exclusive_or()
    lasso = lasso_attribution(game, 500, seed=0, n_holdout=2000)
    spex = proxyspex(game, 500, seed=0, n_holdout=2000, grid=SMALL_GRID)
    assert spex.faithfulness > 0.99
    assert lasso.faithfulness < 1 / 26 + 0.03  # at most the best additive fit, up to sampling error
    assert lasso.faithfulness > -0.03


def test_n_evaluations_counts_the_distinct_masks_spent_and_holdout_is_shared() -> None:
    game = additive(8)
    result = lasso_attribution(game, 120, seed=3, n_holdout=50, batch_size=32)
    fitted = torch.cat(game.seen[:-2])  # the last two calls: the held-out batches
    assert result.n_evaluations == 120 == fitted.shape[0] == torch.unique(fitted, dim=0).shape[0]
    assert torch.equal(torch.cat(game.seen[-2:]), holdout_masks(8, 120, 50, seed=3))
    spex_game = additive(8)
    proxyspex(spex_game, 120, seed=3, n_holdout=50, grid=SMALL_GRID, batch_size=200)
    assert torch.equal(spex_game.seen[0], torch.cat(game.seen[:-2]))  # same training masks
    assert torch.equal(spex_game.seen[1], holdout_masks(8, 120, 50, seed=3))  # same held-out masks
    assert result.n_holdout_evaluations == 50


def test_budget_above_all_masks_uses_each_mask_once() -> None:
    game = additive(4)
    assert lasso_attribution(game, 100, seed=0, n_holdout=20).n_evaluations == 16


def test_additive_faithfulness_of_exact_shapley() -> None:
    holdout = holdout_masks(12, 200, 3000, seed=0)
    exact = exact_shapley(additive())
    assert additive_game(exact)[frozenset()] == pytest.approx(4.0)
    assert additive_faithfulness(exact, additive(), holdout) == pytest.approx(1.0, abs=1e-12)
    # Shapley splits each pair evenly: f - (3 x_0 + 3 x_1 - 2.5 x_2 - 2.5 x_3 + x_4) = -3 XOR(x_0, x_1)
    # + 2.5 XOR(x_2, x_3), whose mean square 31/8 over all masks leaves R^2 = 1 - (31/8) / (187/16) = 125/187
    game, every = pairs(), all_masks(10)
    phi = exact_shapley(game)
    assert additive_faithfulness(phi, game, every) == pytest.approx(125 / 187, abs=1e-12)
    sampled = kernel_shap(game, 300, seed=0)
    assert additive_faithfulness(sampled, game, every) == pytest.approx(125 / 187, abs=0.05)


def test_bad_input() -> None:
    game = additive(8)
    with pytest.raises(ValueError, match="budget=5; LASSO needs at least 10"):
        lasso_attribution(game, 5)
    with pytest.raises(ValueError, match="n_holdout=1"):
        lasso_attribution(game, 50, n_holdout=1)
    with pytest.raises(ValueError, match="n_alphas=0"):
        lasso_attribution(game, 50, n_alphas=0)
    game.n_players = None
    with pytest.raises(ValueError, match="n_players=None"):
        lasso_attribution(game, 50)
    result = exact_shapley(additive(8))
    with pytest.raises(ValueError, match=r"holdout has shape \(5, 7\)"):
        additive_faithfulness(result, additive(8), torch.zeros(5, 7, dtype=torch.bool))
    with pytest.raises(ValueError, match=r"result.values has shape \(8,\); expected \(12,\)"):
        additive_faithfulness(result, additive(12), torch.zeros(5, 12, dtype=torch.bool))


def test_wrong_value_shape_is_reported() -> None:
    class Flat(Planted):
        def __call__(self, masks: torch.Tensor) -> torch.Tensor:
            return torch.zeros(masks.shape[0], 2)

    with pytest.raises(ValueError, match="value function: returned shape"):
        lasso_attribution(Flat(6, {}), 40)
