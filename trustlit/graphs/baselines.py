"""Baselines for TopER graph classification, run through :func:`trustlit.graphs.classifier.nested_cross_validation`.

- Weisfeiler–Lehman subtree kernel (Shervashidze et al., JMLR 2011) through ``grakel``: h iterations of label
  refinement from the node degrees (the graphs carry no labels), the normalised kernel
  K(G, G') = <φ(G), φ(G')> / sqrt(<φ(G), φ(G)> <φ(G'), φ(G')>), φ the counts of refined labels; an SVM on the
  precomputed kernel, its C chosen in the inner folds (:func:`svm_fit_predict`).
- Persistence images (Adams et al., JMLR 2017) through ``gudhi``: the lower-star (sublevel) filtration of the same
  node function TopER uses (degree: a node enters at f(v), an edge at max(f(u), f(v))), its H0 and H1 persistence
  diagrams (essential classes die at max f), each turned into a Gaussian-weighted image on a grid shared by the
  dataset (its range read from all diagrams: label-free), the two images concatenated; an RBF SVM on them.
- The released ``toper`` package (AstritTola/TopER, ``toper.main``) as the peer of our TopER vectors: its sublevel
  and superlevel (pivot, growth) of one filtration, thresholds taken from the whole dataset, fed to the same MLP.

Every feature function returns ``(features or kernel, seconds per graph)`` so the benchmark reports extraction cost.

Notes: docs/methods/toper_classifier.md
"""

from __future__ import annotations

import contextlib
import io
import time
from collections.abc import Mapping, Sequence
from typing import Any

import networkx as nx
import numpy as np

from trustlit.graphs.classifier import FitPredict

# toper.main's names of the filtrations (its keys "<name>_sub", "<name>_super" in the result).
TOPER_PACKAGE_NAMES = {"degree": "degree", "degree_centrality": "deg_cen", "popularity": "popularity"}
TOPER_PACKAGE_NAMES |= {"closeness": "closeness", "forman": "fricci", "ollivier": "oricci"}


def toper_package_features(
    graphs: Sequence[nx.Graph], filtrations: Sequence[str] = ("degree",), levels: Sequence[str] = ("sub", "super")
) -> np.ndarray:
    """The released package's TopER vectors [N, 2 x filtrations x levels] (``toper.main`` on copies of the graphs:
    it writes node attributes into the graphs it gets and prints progress, which is swallowed)."""
    import toper

    unknown = [name for name in filtrations if name not in TOPER_PACKAGE_NAMES]
    if unknown:
        raise ValueError(
            f"filtrations={unknown!r} are invalid for the toper package, expected {list(TOPER_PACKAGE_NAMES)}"
        )
    names = [TOPER_PACKAGE_NAMES[name] for name in filtrations]
    with contextlib.redirect_stdout(io.StringIO()):
        result = toper.main([G.copy() for G in graphs], names)
    # toper.main calls Forman-Ricci "forricci", Ollivier-Ricci "olricci" in its result keys.
    keys = {"fricci": "forricci", "oricci": "olricci"}
    columns = [np.asarray(result[f"{keys.get(n, n)}_{level}"], dtype=np.float64) for n in names for level in levels]
    return np.hstack(columns)


def wl_kernel(graphs: Sequence[nx.Graph], iterations: int = 5) -> tuple[np.ndarray, float]:
    """``(K [N, N], seconds per graph)``: the normalised WL subtree kernel, initial labels = node degrees."""
    from grakel.kernels import VertexHistogram, WeisfeilerLehman

    began = time.perf_counter()
    inputs = []
    for G in graphs:
        position = {node: i for i, node in enumerate(G.nodes)}
        edges = [(position[u], position[v]) for u, v in G.edges] + [(position[v], position[u]) for u, v in G.edges]
        degrees = {position[node]: int(degree) for node, degree in G.degree}
        inputs.append([set(edges), degrees])
    kernel = WeisfeilerLehman(n_iter=iterations, base_graph_kernel=VertexHistogram, normalize=True)
    matrix = np.asarray(kernel.fit_transform(inputs), dtype=np.float64)
    return matrix, (time.perf_counter() - began) / max(len(graphs), 1)


def lower_star_diagrams(G: nx.Graph, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """H0 and H1 persistence diagrams [k, 2] of the sublevel filtration of the node function ``values`` (aligned
    with ``G.nodes``) on the graph as a 1-dimensional complex; essential classes die at max(values)."""
    import gudhi

    tree = gudhi.SimplexTree()
    position = {node: i for i, node in enumerate(G.nodes)}
    for i, value in enumerate(values):
        tree.insert([i], filtration=float(value))
    for u, v in G.edges:
        a, b = position[u], position[v]
        tree.insert([a, b], filtration=float(max(values[a], values[b])))
    tree.compute_persistence(persistence_dim_max=True)
    top = float(np.max(values)) if len(values) else 0.0
    diagrams = []
    for dimension in (0, 1):
        pairs = np.asarray(tree.persistence_intervals_in_dimension(dimension), dtype=np.float64).reshape(-1, 2)
        pairs[np.isinf(pairs[:, 1]), 1] = top
        diagrams.append(pairs)
    return diagrams[0], diagrams[1]


def persistence_image_features(
    graphs: Sequence[nx.Graph], resolution: int = 10, bandwidth: float = 1.0
) -> tuple[np.ndarray, float]:
    """``(features [N, 2 resolution^2], seconds per graph)``: H0 and H1 persistence images of the degree sublevel
    filtration (``gudhi.representations.PersistenceImage``, persistence-weighted, shared range)."""
    from gudhi.representations import PersistenceImage

    began = time.perf_counter()
    diagrams = [lower_star_diagrams(G, np.array([d for _, d in G.degree], dtype=np.float64)) for G in graphs]
    images = []
    for dimension in (0, 1):
        per_graph = [d[dimension] if len(d[dimension]) else np.zeros((1, 2)) for d in diagrams]
        imager = PersistenceImage(bandwidth=bandwidth, weight=lambda p: p[1], resolution=[resolution, resolution])
        images.append(imager.fit_transform(per_graph))
    return np.hstack(images), (time.perf_counter() - began) / max(len(graphs), 1)


def svm_fit_predict(features: np.ndarray, labels: np.ndarray, *, kernel: str = "rbf") -> FitPredict:
    """A ``fit_predict(splits, params)`` for :func:`~trustlit.graphs.classifier.nested_cross_validation`: an SVM
    (scikit-learn ``SVC``; ``params``: its ``C``, ...) on standardised ``features`` (``kernel="rbf"``) or on the
    precomputed kernel matrix ``features`` (``kernel="precomputed"``: rows and columns of the split's graphs)."""
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler
    from sklearn.svm import SVC

    if kernel not in ("rbf", "precomputed"):
        raise ValueError(f"kernel={kernel!r} is invalid, expected 'rbf' or 'precomputed'")
    features, labels = np.asarray(features), np.asarray(labels)

    def fit_predict(splits: Sequence[tuple[np.ndarray, np.ndarray]], params: Mapping[str, Any]) -> list[np.ndarray]:
        predictions = []
        for train, test in splits:
            if kernel == "precomputed":
                model = SVC(kernel="precomputed", **params).fit(features[np.ix_(train, train)], labels[train])
                predictions.append(model.predict(features[np.ix_(test, train)]))
            else:
                model = make_pipeline(StandardScaler(), SVC(kernel="rbf", **params))
                predictions.append(model.fit(features[train], labels[train]).predict(features[test]))
        return predictions

    return fit_predict
