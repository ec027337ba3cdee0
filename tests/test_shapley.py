"""Exact Shapley values and the KernelSHAP family on hand-made games with known values."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch

from trustlit.attribution.shapley import (
    all_masks,
    exact_shapley,
    inclusion_probabilities,
    kernel_shap,
    sample_without_replacement,
    size_probabilities,
    unbiased_kernel_shap,
)


class Game:
    """v(S) = sum_i a_i [i in S] + sum_T c_T [T subset of S] (a sum of unanimity games), float64."""

    def __init__(self, n: int, linear: list[float], unanimity: dict[tuple[int, ...], float]) -> None:
        self.n_players = n
        self.linear = torch.tensor(linear, dtype=torch.float64)
        self.unanimity = unanimity

    def __call__(self, masks: torch.Tensor) -> torch.Tensor:
        out = masks.double() @ self.linear
        for players, c in self.unanimity.items():
            out = out + c * masks[:, list(players)].all(1).double()
        return out

    def shapley(self) -> torch.Tensor:
        """Closed form: phi_i = a_i + sum_{T containing i} c_T / |T|."""
        phi = self.linear.clone()
        for players, c in self.unanimity.items():
            phi[list(players)] += c / len(players)
        return phi


GAME = Game(6, [1.0, -2.0, 0.5, 0.0, 3.0, 1.5], {(0, 1): 2.0, (2, 3, 4): -3.0, (1, 5): 1.0, (0, 2, 4, 5): 4.0})
VARIANTS = [
    dict(estimator=e, sampling=s, replacement=r, paired=p)
    for e, s, r, p in itertools.product(
        ["regression", "matrix_vector"], ["kernel", "leverage", "modified_l2", 0.3], [True, False], [True, False]
    )
]


def test_exact_shapley_matches_the_closed_forms() -> None:
    additive = Game(4, [1.0, 2.0, -3.0, 0.25], {})
    torch.testing.assert_close(exact_shapley(additive).values, additive.linear)
    unanimity = Game(5, [0.0] * 5, {(1, 3, 4): 1.0})
    torch.testing.assert_close(exact_shapley(unanimity).values, torch.tensor([0, 1 / 3, 0, 1 / 3, 1 / 3]).double())
    result = exact_shapley(GAME)
    torch.testing.assert_close(result.values, GAME.shapley())
    assert result.n_evaluations == 2**6


def test_exact_shapley_axioms() -> None:
    # efficiency
    result = exact_shapley(GAME)
    full, empty = GAME(torch.ones(1, 6, dtype=torch.bool)), GAME(torch.zeros(1, 6, dtype=torch.bool))
    assert result.values.sum().item() == pytest.approx((full - empty).item())
    # symmetry: players 0 and 1 enter the game alike; dummy: player 3 changes nothing
    sym = Game(4, [1.0, 1.0, 2.0, 0.0], {(0, 1): 5.0, (0, 2): 1.0, (1, 2): 1.0})
    phi = exact_shapley(sym).values
    assert phi[0].item() == pytest.approx(phi[1].item()) and phi[3].item() == pytest.approx(0.0)
    # linearity: phi(2 u + 3 w) = 2 phi(u) + 3 phi(w)
    u, w = Game(4, [1.0, 0, 2, 0], {(1, 3): 1.0}), Game(4, [0, 1.0, 0, -1], {(0, 1, 2): 2.0})

    class Mix:
        n_players = 4

        def __call__(self, masks: torch.Tensor) -> torch.Tensor:
            return 2 * u(masks) + 3 * w(masks)

    torch.testing.assert_close(exact_shapley(Mix()).values, 2 * exact_shapley(u).values + 3 * exact_shapley(w).values)


@pytest.mark.parametrize("variant", VARIANTS, ids=str)
def test_every_variant_is_exact_when_the_budget_covers_every_coalition(variant: dict) -> None:
    result = kernel_shap(GAME, 2**6, **variant)
    torch.testing.assert_close(result.values, GAME.shapley())
    assert result.n_evaluations == 2**6


@pytest.mark.parametrize("variant", VARIANTS, ids=str)
@pytest.mark.parametrize("budget", [7, 20, 41])
def test_every_variant_spends_exactly_its_budget_and_is_efficient(variant: dict, budget: int) -> None:
    calls = []

    class Recording(Game):
        def __call__(self, masks: torch.Tensor) -> torch.Tensor:
            calls.extend(map(tuple, masks.tolist()))
            return super().__call__(masks)

    game = Recording(6, GAME.linear.tolist(), GAME.unanimity)
    result = kernel_shap(game, budget, seed=3, **variant)
    assert result.n_evaluations == budget == len(set(calls)) == len(calls)
    assert result.values.sum().item() == pytest.approx(result.full_value - result.empty_value)


@pytest.mark.parametrize(("n", "m"), [(12, 300), (300, 2998), (784, 31358)])
@pytest.mark.parametrize("tau", [0.0, 0.5, 1.0])
def test_inclusion_probabilities_are_min_1_cp_and_spend_the_budget(n, m, tau) -> None:
    """q = min(1, c p) for one c (strata are spent in proportion to their mass) at any n: an approximate c
    saturates the small strata or starves them, which biases the estimators from n ~ 200 on."""
    p = size_probabilities(n, tau)
    counts = np.array([math.comb(n, s) for s in range(1, n)], dtype=float)
    q = inclusion_probabilities(p, counts, m)
    assert (counts * q).sum() == pytest.approx(m, rel=1e-9)
    assert (q > 0).all() and (q <= 1).all()
    unsaturated = q < 1
    np.testing.assert_allclose(q[unsaturated] / p[unsaturated], (q / p)[unsaturated][0], rtol=1e-9)
    assert (p[~unsaturated].min(initial=np.inf) >= p[unsaturated].max()) if (~unsaturated).any() else True


def test_without_replacement_inclusion_probabilities_are_the_papers() -> None:
    n, m, runs = 5, 12, 2000
    p = size_probabilities(n, 0.0)
    counts = np.array([math.comb(n, s) for s in range(1, n)], dtype=float)
    q = inclusion_probabilities(p, counts, m)
    assert (counts * q).sum() == pytest.approx(m)
    for paired in (False, True):
        rng = np.random.default_rng(0)
        freq = np.zeros(2**n)
        for _ in range(runs):
            masks, weights = sample_without_replacement(n, m, 0.0, paired, rng)
            assert len(masks) == m and len({m_.tobytes() for m_ in masks}) == m
            codes = (masks * (1 << np.arange(n))).sum(1)
            freq[codes] += 1
            np.testing.assert_allclose(weights, 1 / q[masks.sum(1) - 1])
        sizes = all_masks(n).sum(1).numpy()
        proper = (sizes > 0) & (sizes < n)
        np.testing.assert_allclose(freq[proper] / runs, q[sizes[proper] - 1], atol=0.04)


@pytest.mark.parametrize("sampling", ["kernel", "leverage", "modified_l2"])
def test_matrix_vector_without_replacement_is_unbiased(sampling: str) -> None:
    game = Game(5, [1.0, -2.0, 0.5, 0.0, 3.0], {(0, 1): 2.0, (2, 3, 4): -3.0, (1, 4): 4.0})
    runs = 400
    mean = (
        sum(kernel_shap(game, 14, estimator="matrix_vector", sampling=sampling, seed=s).values for s in range(runs))
        / runs
    )
    single = kernel_shap(game, 14, estimator="matrix_vector", sampling=sampling, seed=0).values
    assert (mean - game.shapley()).norm() < 0.15 < (single - game.shapley()).norm()


def test_unbiased_kernel_shap_is_unbiased_and_spends_its_budget() -> None:
    game = Game(5, [1.0, -2.0, 0.5, 0.0, 3.0], {(0, 1): 2.0, (2, 3, 4): -3.0, (1, 4): 4.0})
    results = [unbiased_kernel_shap(game, 16, seed=s) for s in range(400)]
    assert all(r.n_evaluations == 16 for r in results)
    mean = sum(r.values for r in results) / len(results)
    assert (mean - game.shapley()).norm() < 0.2 < (results[0].values - game.shapley()).norm()
    assert all(r.values.sum().item() == pytest.approx(r.full_value - r.empty_value) for r in results)


@pytest.mark.parametrize("sampling", ["kernel", "leverage", "modified_l2"])
def test_regression_estimators_are_consistent(sampling: str) -> None:
    def error(budget: int) -> float:
        runs = [kernel_shap(GAME, budget, sampling=sampling, seed=s).values for s in range(20)]
        return float(sum((r - GAME.shapley()).norm() ** 2 for r in runs) / len(runs))

    small, large = error(10), error(56)
    assert large < 0.25 * small


def test_bad_input() -> None:
    with pytest.raises(ValueError, match=r"budget=6: at least n \+ 1 = 7 evaluations are needed for 6 players"):
        kernel_shap(GAME, 6)
    with pytest.raises(ValueError, match=r"budget=5: at least n \+ 1 = 7"):
        unbiased_kernel_shap(GAME, 5)
    with pytest.raises(ValueError, match=r"sampling='uniform': valid are"):
        kernel_shap(GAME, 20, sampling="uniform")
    with pytest.raises(ValueError, match=r"sampling=1.5: a float tau must lie in \[0, 1\]"):
        kernel_shap(GAME, 20, sampling=1.5)
    with pytest.raises(ValueError, match=r"estimator='ols': valid are"):
        kernel_shap(GAME, 20, estimator="ols")
    with pytest.raises(ValueError, match=r"n_players=21; enumeration needs 1 <= n <= 20"):
        exact_shapley(Game(21, [0.0] * 21, {}))
    with pytest.raises(ValueError, match=r"n_players=1001: the float64 kernel weights overflow past n = 1000"):
        kernel_shap(Game(1001, [0.0] * 1001, {}), 2000)
    with pytest.raises(ValueError, match=r"n_players=1001: the float64 kernel weights overflow"):
        unbiased_kernel_shap(Game(1001, [0.0] * 1001, {}), 2000)
