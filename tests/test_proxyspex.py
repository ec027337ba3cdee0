"""ProxySPEX: exact tree-to-Fourier, Fourier-to-Möbius and Möbius-to-index transforms, recovery of a planted game."""

from __future__ import annotations

import math
from itertools import combinations, product

import lightgbm as lgb
import numpy as np
import pytest
import torch

import trustlit.attribution
from trustlit.attribution.fourier import (
    banzhaf_interaction_index,
    booster_to_fourier,
    fourier_game,
    fourier_to_mobius,
    mobius_game,
    mobius_to_banzhaf,
    mobius_to_shapley,
    shapley_interaction_index,
    tree_to_fourier,
)
from trustlit.attribution.proxy_spex import InteractionResult, proxyspex, top_energy

SMALL_GRID = {"max_depth": [3], "n_estimators": [300], "learning_rate": [0.1]}


def all_masks(n: int) -> torch.Tensor:
    return torch.tensor(list(product([False, True], repeat=n)))


class Planted:
    """A game with known Möbius coefficients; counts the masks it is asked about."""

    def __init__(self, n: int, mobius: dict[frozenset[int], float]) -> None:
        self.n_players, self.mobius, self.calls = n, mobius, 0

    def __call__(self, masks: torch.Tensor) -> torch.Tensor:
        self.calls += masks.shape[0]
        return mobius_game(self.mobius, masks)


def fitted_booster(n: int, seed: int, trees: int = 30) -> lgb.Booster:
    rng = np.random.default_rng(seed)
    x = rng.integers(0, 2, (400, n)).astype(float)
    y = x[:, 0] * x[:, 1] - 2 * x[:, 2] + x[:, 3] * x[:, 4] * x[:, 0] + rng.normal(0, 0.3, 400)
    model = lgb.LGBMRegressor(n_estimators=trees, max_depth=4, min_child_samples=5, verbose=-1, random_state=seed)
    return model.fit(x, y).booster_


def test_single_tree_and_booster_reproduce_predictions_on_every_mask() -> None:
    n = 6
    booster = fitted_booster(n, seed=0)
    masks = all_masks(n)
    x = masks.numpy().astype(float)
    for index, tree in enumerate(booster.dump_model()["tree_info"][:5]):
        leaf_sum = booster.predict(x, start_iteration=index, num_iteration=1)
        assert torch.allclose(fourier_game(tree_to_fourier(tree["tree_structure"]), masks), torch.tensor(leaf_sum))
    whole = fourier_game(booster_to_fourier(booster), masks)
    assert torch.allclose(whole, torch.tensor(booster.predict(x)), atol=1e-9)


def test_tree_with_repeated_and_degenerate_splits() -> None:
    def leaf(v: float) -> dict:
        return {"leaf_value": v}

    def split(j: int, left: dict, right: dict, threshold: float = 0.5) -> dict:
        return {
            "split_feature": j,
            "threshold": threshold,
            "decision_type": "<=",
            "left_child": left,
            "right_child": right,
        }

    # player 0 split again on both sides of the root; thresholds 0 and 1 sit on the values themselves
    # (under "<=" a threshold of 1 sends both values of player 2 left)
    inner_left = split(1, leaf(1.0), split(0, leaf(5.0), leaf(7.0), 0.0))
    inner_right = split(2, split(0, leaf(-3.0), leaf(4.0)), leaf(9.0), 1.0)
    tree = split(0, inner_left, inner_right)

    def walk(node: dict, x: tuple[bool, ...]) -> float:
        while "leaf_value" not in node:
            node = node["left_child"] if x[node["split_feature"]] <= node["threshold"] else node["right_child"]
        return node["leaf_value"]

    masks = all_masks(3)
    truth = torch.tensor([walk(tree, tuple(m.tolist())) for m in masks], dtype=torch.float64)
    assert torch.allclose(fourier_game(tree_to_fourier(tree), masks), truth)


def test_fourier_to_mobius_keeps_the_game() -> None:
    n = 7
    rng = np.random.default_rng(1)
    fourier = {
        frozenset(map(int, rng.choice(n, size=rng.integers(0, 5), replace=False))): float(rng.normal())
        for _ in range(15)
    }
    masks = all_masks(n)
    assert torch.allclose(mobius_game(fourier_to_mobius(fourier), masks), fourier_game(fourier, masks), atol=1e-10)


def brute_force(game: Planted, n: int) -> tuple[torch.Tensor, torch.Tensor, dict, dict]:
    """Shapley and Banzhaf values and pairwise interaction indices by enumerating every coalition."""
    masks = all_masks(n)
    table = {tuple(m.tolist()): float(v) for m, v in zip(masks, game(masks), strict=True)}

    def v(coalition: set[int]) -> float:
        return table[tuple(i in coalition for i in range(n))]

    shapley, banzhaf = torch.zeros(n, dtype=torch.float64), torch.zeros(n, dtype=torch.float64)
    sii, bii = {}, {}
    for i in range(n):
        others = [p for p in range(n) if p != i]
        for size in range(n):
            for s in combinations(others, size):
                gain = v(set(s) | {i}) - v(set(s))
                shapley[i] += gain * math.factorial(size) * math.factorial(n - size - 1) / math.factorial(n)
                banzhaf[i] += gain / 2 ** (n - 1)
    for i, j in combinations(range(n), 2):
        others = [p for p in range(n) if p not in (i, j)]
        total_s = total_b = 0.0
        for size in range(n - 1):
            for s in combinations(others, size):
                base = set(s)
                delta = v(base | {i, j}) - v(base | {i}) - v(base | {j}) + v(base)
                total_s += delta * math.factorial(size) * math.factorial(n - size - 2) / math.factorial(n - 1)
                total_b += delta / 2 ** (n - 2)
        sii[frozenset((i, j))], bii[frozenset((i, j))] = total_s, total_b
    return shapley, banzhaf, sii, bii


def test_indices_from_mobius_match_enumeration() -> None:
    n = 6
    mobius = {
        frozenset(): 0.5,
        frozenset({0}): 1.0,
        frozenset({1, 2}): -2.0,
        frozenset({0, 3, 4}): 3.0,
        frozenset({1, 2, 4, 5}): 1.5,
    }
    game = Planted(n, mobius)
    shapley, banzhaf, sii, bii = brute_force(game, n)
    assert torch.allclose(mobius_to_shapley(mobius, n), shapley)
    assert torch.allclose(mobius_to_banzhaf(mobius, n), banzhaf)
    got_s, got_b = shapley_interaction_index(mobius, n, 2), banzhaf_interaction_index(mobius, n, 2)
    for pair in sii:
        assert got_s.get(pair, 0.0) == pytest.approx(sii[pair], abs=1e-12)
        assert got_b.get(pair, 0.0) == pytest.approx(bii[pair], abs=1e-12)
    # efficiency: the Shapley values share out v(N) - v(empty)
    assert float(shapley.sum()) == pytest.approx(sum(a for t, a in mobius.items() if t))


def test_top_energy_keeps_the_fewest_reaching_the_share() -> None:
    fourier = {frozenset(): 100.0, frozenset({0}): 3.0, frozenset({1}): 2.0, frozenset({2}): 1.0, frozenset({3}): 0.1}
    # squares 9, 4, 1, 0.01 of 14.01: 9 + 4 = 13 is 92.8 %, so the third is needed for 95 %
    assert top_energy(fourier, 0.95) == [frozenset(), frozenset({0}), frozenset({1}), frozenset({2})]
    assert top_energy(fourier, 0.5) == [frozenset(), frozenset({0})]


# Every nonzero Fourier coefficient of this game has magnitude 1/2 (15 of them), so the 95 % energy rule must keep
# them all: dropping any one loses 1/15 of the energy. (A weaker triple, e.g. 1.5, has Fourier coefficients of
# 1.5/8 that the rule drops by design, and then the refit cannot recover it.)
PLANTED = {
    frozenset(): 1.0,
    frozenset({0}): 1.0,
    frozenset({1}): -1.0,
    frozenset({2, 3}): 2.0,
    frozenset({5, 7}): -2.0,
    frozenset({4, 6, 8}): 4.0,
}


def test_planted_sparse_game_is_recovered() -> None:
    n = 11
    game = Planted(n, PLANTED)
    result = proxyspex(game, 800, seed=0, n_holdout=2000, grid=SMALL_GRID)
    assert result.faithfulness > 0.999
    assert result.n_evaluations == 800 and game.calls == 800 + 2000
    for t, a in PLANTED.items():
        assert result.mobius.get(t, 0.0) == pytest.approx(a, abs=0.05)
    spurious = [abs(a) for t, a in result.mobius.items() if t not in PLANTED]
    assert max(spurious, default=0.0) < 0.05
    truth = mobius_to_shapley(PLANTED, n)
    assert torch.allclose(result.shapley, truth, atol=0.05)
    assert result.shapley_interactions(2)[frozenset({4, 6})] == pytest.approx(4.0 / 2, abs=0.05)  # a[T] / (3 - 2 + 1)


def test_budget_covering_every_mask_uses_each_once() -> None:
    game = Planted(5, {frozenset({0, 1}): 1.0, frozenset({2}): 0.5})
    result = proxyspex(game, 1000, seed=3, n_holdout=50, grid=SMALL_GRID)
    assert result.n_evaluations == 32


def test_bad_inputs_get_one_line_errors() -> None:
    game = Planted(10, PLANTED)
    with pytest.raises(ValueError, match=r"^budget=5; ProxySPEX needs at least 11 evaluations for n=10 players$"):
        proxyspex(game, 5)

    class WrongShape(Planted):
        def __call__(self, masks: torch.Tensor) -> torch.Tensor:
            return super().__call__(masks)[:, None]

    with pytest.raises(ValueError, match=r"returned shape \(100, 1\) for 100 masks; expected \(100,\)") as info:
        proxyspex(WrongShape(10, PLANTED), 100, grid=SMALL_GRID)
    assert "\n" not in str(info.value)
    with pytest.raises(ValueError, match="n_players"):
        proxyspex(lambda masks: masks.sum(1), 100)
    with pytest.raises(ValueError, match=r"^masks: width 3, but the coefficients name player 4$"):
        mobius_game({frozenset({4}): 1.0}, torch.zeros(4, 3, dtype=torch.bool))


def test_package_exports_the_function_whatever_was_imported_first() -> None:
    # the submodule is already imported above; the package attribute must still be the estimator
    assert trustlit.attribution.proxyspex is proxyspex and trustlit.attribution.InteractionResult is InteractionResult


def test_shapley_of_a_fitted_result_equals_exact_shapley_of_its_reconstructed_game() -> None:
    from trustlit.attribution.shapley import exact_shapley

    class Noisy(Planted):
        """Planted game plus a fixed pseudo-random term, so the proxy's reconstruction is not the truth."""

        def __call__(self, masks: torch.Tensor) -> torch.Tensor:
            code = (masks.long() * (torch.arange(masks.shape[1]) + 3)).sum(1)
            return super().__call__(masks) + 0.3 * torch.sin(code.to(torch.float64) * 1.7)

    result = proxyspex(Noisy(10, PLANTED), 300, seed=1, n_holdout=100, grid=SMALL_GRID)
    assert 0.5 < result.faithfulness < 1.0  # an imperfect reconstruction: the check is on the estimate's own game
    exact = exact_shapley(result)  # the result is itself a value function: its reconstructed game
    assert torch.allclose(result.shapley, exact.values.to(torch.float64), atol=1e-9)
