"""The paper's ridge selection (trustlit/neuro/ridge.py: one alpha per target by 5-fold CV, himalaya's ``RidgeCV``)
against a brute-force search with scikit-learn's ``Ridge``, on planted problems, with n < p, and on bad input."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.linear_model import Ridge
from sklearn.model_selection import KFold

from trustlit.neuro.ridge import fit_ridge, kfold_ridge

GRID = np.logspace(-3, 3, 7)


def brute_force(x: np.ndarray, y: np.ndarray, alphas: np.ndarray, cv: int, per_target: bool):
    """One scikit-learn Ridge per fold and alpha, the validation MSE per target averaged over folds, the best alpha
    (ties: the larger), then one Ridge per target on all rows with its alpha."""
    mse = np.zeros((len(alphas), y.shape[1]))
    for train, valid in KFold(cv).split(x):
        for a, alpha in enumerate(alphas):
            predicted = Ridge(alpha=alpha).fit(x[train], y[train]).predict(x[valid])
            mse[a] += ((y[valid] - predicted) ** 2).mean(0) / cv
    if per_target:
        best = [max(range(len(alphas)), key=lambda a, j=j: (-mse[a, j], a)) for j in range(y.shape[1])]
    else:
        best = [max(range(len(alphas)), key=lambda a: (-mse[a].mean(), a))] * y.shape[1]
    chosen = alphas[best]
    models = [Ridge(alpha=alpha).fit(x, y[:, j]) for j, alpha in enumerate(chosen)]
    return chosen, np.stack([m.coef_ for m in models], 1), np.array([m.intercept_ for m in models])


def planted(n: int, p: int, noise: np.ndarray, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """y_j = x w_j + noise_j e_j, w_j ~ N(0, I), x with a non-zero mean and unequal scales."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, p)) * rng.uniform(0.5, 2, p) + rng.normal(size=p)
    y = x @ rng.normal(size=(p, len(noise))) + noise * rng.normal(size=(n, len(noise))) + 3.0
    return x, y


@pytest.mark.parametrize(("n", "p"), [(37, 6), (23, 60)])  # n > p with unequal folds (37 = 5 * 7 + 2), and n < p
@pytest.mark.parametrize("per_target", [True, False])
def test_kfold_ridge_equals_a_brute_force_search_with_sklearn(n, p, per_target):
    x, y = planted(n, p, np.array([0.1, 1.0, 3.0, 10.0, 30.0]), seed=n)
    solution = kfold_ridge(x, y, GRID, 5, per_target=per_target)
    alphas, coef, intercept = brute_force(x, y, GRID, 5, per_target)
    np.testing.assert_array_equal(solution.alphas, alphas)
    assert (len(np.unique(alphas)) > 1) == per_target  # the noise levels make the per-target picks differ
    np.testing.assert_allclose(solution.coef, coef, rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(solution.intercept, intercept, rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(solution.predict(x[:3]), x[:3] @ coef + intercept, rtol=1e-8, atol=1e-10)


def test_per_target_cv_picks_each_planted_alpha():
    """w ~ N(0, I) and noise N(0, sigma^2): the posterior mean is the ridge with alpha = sigma^2 / tau^2, 1 for the
    targets with sigma = 1 and 100 for those with sigma = 10. Per target the 5-fold choice lands on it for most
    targets of each group and on the right one in median; a shared alpha can be right for one group only."""
    noise = np.repeat([1.0, 10.0], 100)
    x, y = planted(500, 20, noise, seed=1)
    alphas = np.logspace(-2, 4, 7)
    chosen = kfold_ridge(x, y, alphas, 5).alphas
    for sigma in (1.0, 10.0):
        picks = chosen[noise == sigma]
        assert np.median(picks) == sigma**2
        assert np.mean(picks == sigma**2) > 0.5  # measured: 0.62 and 0.94 (seed 1)
    shared = kfold_ridge(x, y, alphas, 5, per_target=False).alphas
    assert len(np.unique(shared)) == 1 and shared[0] in (1.0, 100.0)


def test_fit_ridge_selections_and_a_single_alpha():
    x, y = planted(40, 8, np.array([0.5, 5.0]), seed=2)
    loo = fit_ridge(x, y, GRID, 5, "loo_per_target")
    assert not loo.shared and loo.alphas.shape == (2,)
    single = fit_ridge(x, y, [2.0], 5, "kfold_per_target")
    reference = Ridge(alpha=2.0).fit(x, y)
    np.testing.assert_allclose(single.coef, reference.coef_.T, rtol=1e-10)
    assert single.shared and (single.alphas == 2.0).all()
    np.testing.assert_array_equal(fit_ridge(x, y, GRID, 5, "kfold_shared").alphas, brute_force(x, y, GRID, 5, False)[0])


def test_bad_input_raises_one_line():
    x, y = planted(4, 3, np.array([1.0]), seed=3)
    with pytest.raises(ValueError, match="cv=5 folds need at least 5 samples, got 4"):
        kfold_ridge(x, y, GRID, 5)
    with pytest.raises(ValueError, match=r"selection='gcv' is invalid, expected one of 'kfold_per_target'"):
        fit_ridge(x, y, GRID, 2, "gcv")
    with pytest.raises(ValueError, match=r"alphas=\[-1.0\] is invalid"):
        kfold_ridge(x, y, [-1.0], 2)
    with pytest.raises(ValueError, match=r"x \(4, 3\) and y \(3, 1\) must be 2-D with one row per sample"):
        kfold_ridge(x, y[:3], GRID, 2)
