"""SpLiCE (trustlit/interpret/splice.py): ADMM against scikit-learn's positive Lasso (SpLiCE's own 'skl' solver,
alpha = l1 / (2 D)) and scipy's NNLS at l1 = 0, sparsity that grows with l1, exact recovery of a planted
sparse non-negative combination, the released centring, and bad input."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch
from scipy.optimize import nnls
from sklearn.linear_model import Lasso

from trustlit.interpret.splice import (
    admm,
    center_concepts,
    centred_problem,
    embedding_mean,
    l1_for_sparsity,
    mean_nonzeros,
    recompose,
    splice,
)

pytestmark = pytest.mark.usefixtures("one_thread")
TIGHT = {"tol": 1e-10, "max_iter": 20000}


def problem(seed: int, concepts: int = 12, dim: int = 24, rows: int = 5) -> tuple[torch.Tensor, torch.Tensor]:
    rng = np.random.default_rng(seed)
    dictionary = center_concepts(rng.normal(size=(concepts, dim)))
    targets = torch.nn.functional.normalize(torch.as_tensor(rng.normal(size=(rows, dim))), dim=1)
    return dictionary, targets


def objective(weights: np.ndarray, dictionary: np.ndarray, targets: np.ndarray, l1: float) -> np.ndarray:
    return ((targets - weights @ dictionary) ** 2).sum(1) + l1 * np.abs(weights).sum(1)


@pytest.mark.parametrize(("seed", "l1"), [(0, 0.05), (1, 0.2), (2, 0.5)])
def test_agrees_with_positive_lasso(seed, l1):
    dictionary, targets = problem(seed)
    weights = admm(dictionary, targets, l1, **TIGHT).numpy()
    dim = dictionary.shape[1]
    lasso = Lasso(alpha=l1 / (2 * dim), positive=True, fit_intercept=False, tol=1e-12, max_iter=100000)
    peer = np.stack([lasso.fit(dictionary.numpy().T, v).coef_ for v in targets.numpy()])
    np.testing.assert_allclose(weights, peer, atol=1e-6)
    assert (weights >= 0).all()
    gap = objective(weights, dictionary.numpy(), targets.numpy(), l1) - objective(
        peer, dictionary.numpy(), targets.numpy(), l1
    )
    assert np.abs(gap).max() < 1e-9


def test_l1_zero_is_nnls():
    dictionary, targets = problem(3, concepts=10, dim=30)
    weights = admm(dictionary, targets, 0.0, **TIGHT).numpy()
    peer = np.stack([nnls(dictionary.numpy().T, v)[0] for v in targets.numpy()])
    np.testing.assert_allclose(weights, peer, atol=1e-6)


def test_sparsity_grows_with_l1():
    dictionary, targets = problem(4, concepts=40, dim=32, rows=20)
    counts = [(admm(dictionary, targets, l1) > 0).sum(1).float().mean().item() for l1 in (0.0, 0.05, 0.2, 0.5, 1.0)]
    assert all(a >= b for a, b in itertools.pairwise(counts)) and counts[0] > 3 * counts[-1], counts
    # w = 0 is optimal iff 2 G v <= l1 everywhere, and |g . v| <= 1 for unit rows: l1 > 2 gives all zeros
    assert (admm(dictionary, targets, 2.01) == 0).all() and (admm(dictionary, targets, 1.0) > 0).any()


def test_recovers_planted_sparse_combination():
    """A target that is exactly a 3-sparse non-negative combination of the centred dictionary: at a tiny l1
    the support is exact and the weights are the planted ones up to the O(l1) shrinkage."""
    rng = np.random.default_rng(5)
    raw = rng.normal(size=(30, 64))
    dictionary = center_concepts(raw).numpy()
    planted = np.zeros((4, 30))
    for row in planted:
        row[rng.choice(30, size=3, replace=False)] = rng.uniform(0.5, 1.5, size=3)
    scale = np.linalg.norm(planted @ dictionary, axis=1, keepdims=True)
    embeddings = planted @ dictionary / scale  # unit norm, so with mean 0 the centred target is itself
    weights = splice(embeddings, raw, 1e-5, mean=np.zeros(64), **TIGHT)
    np.testing.assert_array_equal(weights > 1e-4, planted > 0)
    np.testing.assert_allclose(weights, planted / scale, atol=1e-4)
    rebuilt = recompose(weights, raw, np.zeros(64)).numpy()
    np.testing.assert_allclose((rebuilt * embeddings).sum(1), 1.0, atol=1e-6)


def test_splice_centres_as_released():
    """splice = ADMM on normalize(normalize(e) - mu) over the centred dictionary, mu the embeddings' mean."""
    rng = np.random.default_rng(6)
    embeddings, concepts = rng.normal(size=(8, 16)) * 3, rng.normal(size=(10, 16))
    unit = embeddings / np.linalg.norm(embeddings, axis=1, keepdims=True)
    np.testing.assert_allclose(embedding_mean(embeddings).numpy(), unit.mean(0))
    targets = torch.nn.functional.normalize(torch.as_tensor(unit - unit.mean(0)), dim=1)
    expected = admm(center_concepts(concepts), targets, 0.1).numpy()
    weights = splice(embeddings, concepts, 0.1)
    assert weights.dtype == np.float32 and weights.shape == (8, 10)
    np.testing.assert_allclose(weights, expected, atol=1e-6)
    dictionary = center_concepts(concepts).numpy()
    np.testing.assert_allclose(np.linalg.norm(dictionary, axis=1), 1.0)
    torch_weights = splice(torch.as_tensor(embeddings, dtype=torch.float32), concepts, 0.1)
    assert isinstance(torch_weights, torch.Tensor) and torch_weights.dtype == torch.float32
    np.testing.assert_allclose(torch_weights.numpy(), weights, atol=1e-5)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"l1": -0.1}, "l1=-0.1 is invalid"),
        ({"rho": 0}, "rho must be a finite number > 0"),
        ({"max_iter": 0}, "max_iter=0 is invalid"),
        ({"concept_embeddings": np.ones((3, 5))}, "dimension 4 but concept_embeddings 5"),
        ({"embeddings": np.full((2, 4), np.nan)}, "embeddings must be a finite"),
    ],
)
def test_bad_input(kwargs, message):
    arguments = {"embeddings": np.ones((2, 4)), "concept_embeddings": np.eye(3, 4), "l1": 0.1} | kwargs
    l1 = arguments.pop("l1")
    with pytest.raises(ValueError, match=message):
        splice(arguments.pop("embeddings"), arguments.pop("concept_embeddings"), l1, **arguments)


def test_l1_for_sparsity_hits_the_target_count():
    """Bisection on log l1: the returned l1 gives the reported mean count, within tol of the target; l1_max
    (2 G v at its largest) zeroes every weight and anything just below it does not."""
    rng = np.random.default_rng(7)
    embeddings, concepts = rng.normal(size=(30, 32)), rng.normal(size=(40, 32))
    for target in (1.5, 4.0, 9.0):
        l1, found = l1_for_sparsity(embeddings, concepts, target, tol=0.1)
        assert abs(found - target) <= 0.1
        assert mean_nonzeros(splice(embeddings, concepts, l1)) == pytest.approx(found)
    targets, dictionary = centred_problem(embeddings, concepts)
    high = float((2 * targets @ dictionary.T).max())
    assert (
        mean_nonzeros(admm(dictionary, targets, high)) == 0
        and mean_nonzeros(admm(dictionary, targets, 0.99 * high)) > 0
    )


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [({"target": 0}, r"target=0 is invalid, expected a number in \(0, 3\)"), ({"max_steps": 0}, "max_steps=0")],
)
def test_l1_for_sparsity_bad_input(kwargs, message):
    with pytest.raises(ValueError, match=message):
        l1_for_sparsity(np.ones((2, 4)), np.eye(3, 4), **({"target": 1.0} | kwargs))
