"""Intrinsic-dimension estimators (trustlit.interpret.intrinsic_dimension): manifolds of known dimension,
hand computations from independently found neighbours, agreement with scikit-dimension and with DADApy
(the GRIDE authors' code, run in its own environment: it needs numpy < 2), invariances and bad input."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest
import skdim
import torch
from helpers import REPO_ROOT
from sklearn.datasets import make_swiss_roll
from sklearn.neighbors import NearestNeighbors

from trustlit.interpret.intrinsic_dimension import gride, mle, neighbour_distances, twonn

# DADApy 0.3.4 pins numpy < 2 and imports jax at package import: it lives in a venv of its own
# (`make peers`: python -m venv .venv-peers && .venv-peers/bin/pip install dadapy==0.3.4).
PEERS_PYTHON = Path(os.environ.get("TRUSTLIT_PEERS_PYTHON", REPO_ROOT / ".venv-peers" / "bin" / "python"))
N = 2000
RELATIVE_TOLERANCE = 0.1  # every estimator within 10 % of the true dimension on these clouds of 2000 points


def gaussian_subspace(d: int, n: int = N, ambient: int = 100, seed: int = 0) -> np.ndarray:
    """``n`` standard-normal points of a random ``d``-dimensional linear subspace of R^ambient."""
    rng = np.random.default_rng(seed)
    basis = np.linalg.qr(rng.normal(size=(ambient, d)))[0]
    return rng.normal(size=(n, d)) @ basis.T


def sphere(d: int, n: int = N, seed: int = 0) -> np.ndarray:
    """``n`` uniform points of the unit sphere S^d in R^(d+1)."""
    x = np.random.default_rng(seed).normal(size=(n, d + 1))
    return x / np.linalg.norm(x, axis=1, keepdims=True)


MANIFOLDS = {
    "subspace-2": (gaussian_subspace(2), 2),
    "subspace-5": (gaussian_subspace(5), 5),
    "subspace-10": (gaussian_subspace(10), 10),
    "swiss-roll": (make_swiss_roll(N, random_state=0)[0], 2),
    "sphere-S3": (sphere(3), 3),
}
ESTIMATORS = {"twonn": twonn, "mle": mle, "gride": gride, "gride-4-8": lambda X: gride(X, 4, 8)}


@pytest.mark.parametrize("estimator", list(ESTIMATORS))
@pytest.mark.parametrize("manifold", list(MANIFOLDS))
def test_estimators_recover_the_dimension_of_known_manifolds(manifold, estimator):
    X, dimension = MANIFOLDS[manifold]
    estimate = ESTIMATORS[estimator](X)
    assert abs(estimate - dimension) <= RELATIVE_TOLERANCE * dimension, f"{estimator} on {manifold}: {estimate}"


def sklearn_neighbours(X: np.ndarray, k: int) -> np.ndarray:
    return NearestNeighbors(n_neighbors=k).fit(X).kneighbors(return_distance=True)[0]


def test_neighbour_distances_equal_sklearns():
    X = np.random.default_rng(1).normal(size=(700, 30)) * 50 + 1000  # far from the origin: cancellation-prone
    ours = neighbour_distances(torch.as_tensor(X), 12, chunk_size=128).numpy()
    np.testing.assert_allclose(ours, sklearn_neighbours(X, 12), rtol=1e-12)


def test_closed_forms_from_independently_found_neighbours():
    X = gaussian_subspace(4, n=800, seed=2)
    r = sklearn_neighbours(X, 20)
    mu = r[:, 1] / r[:, 0]
    # GRIDE at n1 = 1, n2 = 2 has a closed form: (N - 1) / sum log mu (no ratio is past DADApy's cut here)
    assert mu.max() < np.median(mu) + 20 * (np.percentile(mu, 95) - np.median(mu))
    assert gride(X) == pytest.approx((len(mu) - 1) / np.log(mu).sum(), rel=1e-6)
    inverse = np.log(r[:, -1:] / r[:, :-1]).sum(axis=1) / 19
    assert mle(X, k=20) == pytest.approx(1 / inverse.mean(), rel=1e-12)
    keep = int(len(mu) * 0.9)
    x = np.log(np.sort(mu)[:keep])
    y = -np.log(1 - np.arange(1, keep + 1) / len(mu))
    assert twonn(X) == pytest.approx((x @ y) / (x @ x), rel=1e-12)


@pytest.mark.parametrize("manifold", ["subspace-5", "swiss-roll"])
def test_agreement_with_scikit_dimension(manifold):
    X = MANIFOLDS[manifold][0][:1000]
    assert twonn(X) == pytest.approx(skdim.id.TwoNN(discard_fraction=0.1).fit(X).dimension_, rel=1e-9)
    assert twonn(X, 0.3) == pytest.approx(skdim.id.TwoNN(discard_fraction=0.3).fit(X).dimension_, rel=1e-9)
    # MacKay-Ghahramani pooling = skdim's comb="mle"; our k - 1 normalisation = its unbiased=False
    assert mle(X, k=20) == pytest.approx(skdim.id.MLE().fit(X, n_neighbors=20).dimension_, rel=1e-9)
    assert mle(X, k=10) == pytest.approx(skdim.id.MLE().fit(X, n_neighbors=10).dimension_, rel=1e-9)
    assert mle(X, k=20) != pytest.approx(skdim.id.MLE(unbiased=True).fit(X, n_neighbors=20).dimension_, rel=1e-3)
    for n1, n2 in ((1, 2), (2, 4), (3, 7)):
        assert gride(X, n1, n2) == pytest.approx(skdim.id.GRIDE(n1=n1, n2=n2).fit(X).dimension_, rel=1e-5)


DADAPY_SCRIPT = """
import json, sys
import numpy as np
from dadapy import Data
X = np.load(sys.argv[1])
ids, _, _ = Data(coordinates=X).return_id_scaling_gride(range_max=8)
twonn = Data(coordinates=X).compute_id_2NN(mu_fraction=0.9)[0]
print(json.dumps({"gride": [float(i) for i in ids], "twonn": float(twonn)}))
"""


def dadapy_estimates(X: np.ndarray, tmp_path: Path) -> dict:
    if not PEERS_PYTHON.is_file():
        pytest.fail(
            f"DADApy's environment {PEERS_PYTHON} is missing: create it with `make peers` "
            "(python -m venv .venv-peers && .venv-peers/bin/pip install dadapy==0.3.4) or set TRUSTLIT_PEERS_PYTHON"
        )
    np.save(tmp_path / "points.npy", X)
    environment = {**os.environ, "JAX_PLATFORMS": "cpu", "PYTHONWARNINGS": "ignore"}
    command = [str(PEERS_PYTHON), "-c", DADAPY_SCRIPT, str(tmp_path / "points.npy")]
    result = subprocess.run(command, capture_output=True, text=True, env=environment, timeout=300, check=False)
    assert result.returncode == 0, result.stderr[-2000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_agreement_with_dadapy(tmp_path):
    """GRIDE at n1 = 1, 2, 4 (n2 = 2 n1) equals DADApy's return_id_scaling_gride; TwoNN its compute_id_2NN."""
    X = np.concatenate([MANIFOLDS["subspace-5"][0][:1000], 3 + MANIFOLDS["subspace-10"][0][:1000]])
    peer = dadapy_estimates(X, tmp_path)
    ours = [gride(X, n1, 2 * n1) for n1 in (1, 2, 4)]
    np.testing.assert_allclose(ours, peer["gride"], rtol=1e-6)
    assert twonn(X) == pytest.approx(peer["twonn"], rel=1e-6)


def test_duplicates_are_removed_and_inputs_are_interchangeable():
    X = gaussian_subspace(3, n=500, seed=3)
    with_duplicates = np.concatenate([X, X[:50], X[:5]])
    for estimator in (twonn, mle, gride):
        expected = estimator(X)
        assert estimator(with_duplicates) == pytest.approx(expected, rel=1e-12)
        assert estimator(torch.as_tensor(X, dtype=torch.float64)) == pytest.approx(expected, rel=1e-12)


def test_invariant_to_rotation_translation_and_scale():
    X = gaussian_subspace(4, n=600, seed=4)
    rotation = np.linalg.qr(np.random.default_rng(5).normal(size=(100, 100)))[0]
    moved = 7.5 * X @ rotation + 40.0
    for estimator in (twonn, mle, gride):
        assert estimator(moved) == pytest.approx(estimator(X), rel=1e-6)


def test_too_few_points_after_removing_duplicates_is_an_error():
    X = np.concatenate([gaussian_subspace(2, n=15), gaussian_subspace(2, n=15)[:10]])  # 15 distinct points
    with pytest.raises(ValueError, match=r"mle: needs at least 21 distinct points .* got 15 after removing duplicates"):
        mle(X, k=20)
    with pytest.raises(ValueError, match=r"gride: needs at least 17 distinct points"):
        gride(X, 8, 16)
    with pytest.raises(ValueError, match=r"twonn: needs at least 3 distinct points .* got 2"):
        twonn(np.array([[0.0, 1.0], [1.0, 0.0], [1.0, 0.0]]))


def test_bad_input_names_the_value_and_what_is_valid():
    X = gaussian_subspace(2, n=100)
    with pytest.raises(ValueError, match=r"twonn: X must be 2-D \[N points, D features\], got shape \(100,\)"):
        twonn(X[:, 0])
    with pytest.raises(ValueError, match=r"discard_fraction=1.0 is invalid, expected a number in \(0, 1\)"):
        twonn(X, discard_fraction=1.0)
    with pytest.raises(ValueError, match=r"discard_fraction=0 is invalid"):
        twonn(X, discard_fraction=0)
    with pytest.raises(ValueError, match=r"mle: k=1 is invalid, expected an integer >= 2"):
        mle(X, k=1)
    with pytest.raises(ValueError, match=r"gride: n1=2, n2=2 are invalid, expected integers with 1 <= n1 < n2"):
        gride(X, 2, 2)
    with pytest.raises(ValueError, match=r"NaN or infinite"):
        gride(np.full((10, 3), np.nan))
