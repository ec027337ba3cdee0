"""TopERClassifier, its stacked trainer, nested cross-validation (no peeking at the outer test fold) and baselines."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from helpers import quiet_trainer
from torch.utils.data import DataLoader

from trustlit.data.graphs import GraphDataModule, generated_graphs, stratified_folds
from trustlit.graphs.baselines import lower_star_diagrams, svm_fit_predict, toper_package_features, wl_kernel
from trustlit.graphs.classifier import (
    PAPER_GRID,
    StackedTopERClassifier,
    TopERClassifier,
    expand_grid,
    mlp_fit_predict,
    nested_cross_validation,
)

torch.set_num_threads(1)


def test_nested_selection_never_uses_the_outer_test_fold():
    """Planted: configuration 0 is perfect everywhere except on the outer test folds, configuration 1 only on them.
    Nested CV must pick 0 (and score 0), test-fold selection picks 1 (and scores 1); peeking would pick 1."""
    labels = np.repeat([0, 1], 20)
    calls = []

    def fit_predict(splits, params):
        outcomes = []
        for train, test in splits:
            calls.append((train, test))
            is_outer = len(train) + len(test) == labels.size
            correct = is_outer if params["cheat"] else not is_outer
            outcomes.append(labels[test] if correct else 1 - labels[test])
        return outcomes

    cv = nested_cross_validation(
        labels, fit_predict, [{"cheat": False}, {"cheat": True}], outer_folds=4, inner_folds=3, seed=3
    )
    assert cv.chosen == [0, 0, 0, 0]
    assert cv.nested.tolist() == [0.0] * 4 and cv.test_fold.tolist() == [1.0] * 4
    # spy: every inner split lies inside its outer training part
    folds = stratified_folds(labels, 4, seed=3)
    inner = [(tr, te) for tr, te in calls if len(tr) + len(te) < labels.size]
    assert len(inner) == 2 * 4 * 3
    for k, fold in enumerate(folds):
        for train, test in inner[3 * k : 3 * k + 3]:
            assert set(fold).isdisjoint(train) and set(fold).isdisjoint(test)


def test_test_fold_selection_inflates_chance_accuracy():
    """Random labels, 30 configurations that guess: nested CV stays near chance (1/2), picking the best on the test
    fold does not. Over 10 folds x 20 graphs the nested mean has sd 0.035: 0.5 +- 0.14 is a 4-sigma band; the
    max of 30 guesses on 20 graphs averages about 0.72 (its 10-fold mean is above 0.62 with overwhelming odds)."""
    rng = np.random.default_rng(0)
    labels = rng.integers(0, 2, 200)

    def fit_predict(splits, params):
        guess = np.random.default_rng(params["seed"])
        return [guess.integers(0, 2, len(test)) for _, test in splits]

    cv = nested_cross_validation(labels, fit_predict, [{"seed": s} for s in range(30)], outer_folds=10, inner_folds=3)
    assert abs(cv.nested.mean() - 0.5) < 0.14
    assert cv.test_fold.mean() > 0.62
    assert cv.summary()["test_fold_mean"] == pytest.approx(cv.test_fold.mean())


def separable(n=120, seed=0):
    rng = np.random.default_rng(seed)
    labels = np.repeat([0, 1, 2], n // 3)
    features = rng.normal(size=(n, 4)) + 4.0 * np.eye(3, 4)[labels]
    return features, labels


def test_classifier_learns_a_separable_task_with_a_stock_trainer():
    features, labels = separable()
    torch.manual_seed(0)
    model = TopERClassifier(num_features=4, num_classes=3, hidden=16, lr=0.01)
    x, y = torch.tensor(features, dtype=torch.float32), torch.tensor(labels)
    quiet_trainer(max_epochs=1).fit(model, train_dataloaders=DataLoader([(x, y)] * 100, batch_size=None))
    model.eval()
    assert (model(x).argmax(-1) == y).float().mean() > 0.95


def test_fit_on_graph_data_draws_every_graph_in_the_toper_scatter(tmp_path, monkeypatch):
    """After fit on a GraphDataModule: toper_scatter.png with one series per class, each point a graph's (b, a)."""
    import trustlit.figures as figures

    drawn, save_png = [], figures.save_png

    def capture(figure, path):
        drawn.append([series.get_offsets().data.copy() for series in figure.axes[0].collections])
        return save_png(figure, path)

    monkeypatch.setattr(figures, "save_png", capture)
    data = GraphDataModule(task="generators", graphs_per_class=4, folds=2, val_folds=2, cache_dir=None)
    model = TopERClassifier(num_features=4, num_classes=5, hidden=8)
    quiet_trainer(max_epochs=1, default_root_dir=tmp_path).fit(model, datamodule=data)
    assert (tmp_path / "toper_scatter.png").stat().st_size > 0
    (series,) = drawn
    assert len(series) == len(data.class_names) == 5
    for label, points in enumerate(series):
        np.testing.assert_allclose(points, data.features[data.labels == label][:, [1, 0]])


def test_paper_grid_expands_to_its_144_distinct_configurations():
    grid = expand_grid(PAPER_GRID)
    assert len(grid) == 144 == len({tuple(sorted(c.items())) for c in grid})
    assert grid[0] == {name: values[0] for name, values in PAPER_GRID.items()}  # itertools.product order
    assert all(TopERClassifier(num_features=4, num_classes=2, **config) for config in grid[::29])


def test_stacked_members_equal_separate_trainer_fits():
    """Two members trained together = two TopERClassifier fits by a stock Trainer on their own rows (no dropout)."""
    features, labels = separable(60)
    x, y = torch.tensor(features, dtype=torch.float32), torch.tensor(labels)
    rows = [np.arange(0, 60, 2), np.arange(1, 60, 3)]
    params = dict(num_features=4, num_classes=3, hidden=8, hidden_batch_norm=True, activation="gelu", lr=0.01)
    members = []
    for seed in (0, 1):
        torch.manual_seed(seed)
        members.append(TopERClassifier(**params))
    mask = torch.zeros(2, 60)
    for m, r in enumerate(rows):
        mask[m, r] = 1.0
    stacked = StackedTopERClassifier(members).fit(x, y, mask, 30)
    for m, r in enumerate(rows):
        batches = [(x[r], y[r])] * 30
        quiet_trainer(max_epochs=1).fit(members[m], train_dataloaders=DataLoader(batches, batch_size=None))
        members[m].eval()
        with torch.no_grad():
            assert torch.allclose(stacked(x)[m], members[m](x), atol=1e-4)


def test_mlp_fit_predict_in_nested_cv_on_a_separable_task():
    features, labels = separable()
    fit_predict = mlp_fit_predict(features, labels, max_epochs=60)
    cv = nested_cross_validation(
        labels, fit_predict, [{"hidden": 16}, {"hidden": 16, "lr": 1e-4}], outer_folds=3, inner_folds=2
    )
    assert cv.nested.mean() > 0.9 and cv.test_fold.mean() >= cv.nested.mean()
    assert cv.inner.shape == (3, 2) and all(c == 0 for c in cv.chosen)  # lr 1e-4 for 60 steps barely moves


def test_baselines_on_a_small_generated_task():
    graphs, labels, _ = generated_graphs("sbm", 8, min_nodes=20, max_nodes=30, seed=0)
    kernel, seconds = wl_kernel(graphs, iterations=2)
    assert kernel.shape == (32, 32) and np.allclose(np.diag(kernel), 1.0) and seconds > 0
    cv = nested_cross_validation(
        labels, svm_fit_predict(kernel, labels, kernel="precomputed"), [{"C": 1.0}], outer_folds=2, inner_folds=2
    )
    assert cv.outer.shape == (2, 1)
    package = toper_package_features(graphs[:3])
    assert package.shape == (3, 4) and np.isfinite(package).all()


def test_lower_star_diagrams_of_a_path_and_a_triangle():
    import networkx as nx

    # path 0-1-2 with f = (0, 2, 1): components born at 0 and 1 merge at 2; one essential class from 0 to max f
    h0, h1 = lower_star_diagrams(nx.path_graph(3), np.array([0.0, 2.0, 1.0]))
    assert sorted(map(tuple, h0)) == [(0.0, 2.0), (1.0, 2.0)] and len(h1) == 0
    h0, h1 = lower_star_diagrams(nx.complete_graph(3), np.array([1.0, 1.0, 1.0]))
    assert h1.tolist() == [[1.0, 1.0]]


def test_bad_arguments():
    with pytest.raises(ValueError, match="activation='tanh'"):
        TopERClassifier(activation="tanh")
    with pytest.raises(ValueError, match=r"dropout=1\.0"):
        TopERClassifier(dropout=1.0)
    with pytest.raises(ValueError, match="grid"):
        nested_cross_validation(np.zeros(20, dtype=int), lambda s, p: [], [])
    with pytest.raises(ValueError, match="kernel='linear'"):
        svm_fit_predict(np.zeros((2, 2)), np.zeros(2), kernel="linear")
    with pytest.raises(ValueError, match="toper package"):
        toper_package_features([], ["betweenness"])
