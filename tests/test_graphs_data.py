"""GraphDataModule and its sources: the TU text format on a hand-written sample, generated tasks, the feature cache."""

from __future__ import annotations

import networkx as nx
import numpy as np
import pytest

from trustlit.data.graphs import (
    GENERATORS,
    PARAMETERS,
    GraphDataModule,
    cached_features,
    generated_graphs,
    load_tu_dataset,
    stratified_folds,
)
from trustlit.graphs.toper import toper_dataset_features, toper_features

# Three graphs: a triangle (nodes 1-3, label 1), a path 4-5-6-7 (label -1) and an edge 8-9 with an isolated node 10
# (label 1); every edge is listed in both directions, as TU files do, and 8-8 is a self-loop the loader drops.
TU_FILES = {
    "A": "1, 2\n2, 1\n2, 3\n3, 2\n1, 3\n3, 1\n4, 5\n5, 4\n5, 6\n6, 5\n6, 7\n7, 6\n8, 9\n9, 8\n8, 8\n",
    "graph_indicator": "1\n1\n1\n2\n2\n2\n2\n3\n3\n3\n",
    "graph_labels": "1\n-1\n1\n",
    "node_labels": "0\n1\n2\n0\n0\n1\n1\n2\n2\n0\n",
    "node_attributes": "0.5, 1\n1.5, 2\n2.5, 3\n0, 0\n1, 0\n2, 0\n3, 0\n4, 4\n5, 5\n6, 6\n",
}


def write_tu(root, name="TOY", skip=()):
    directory = root / name
    directory.mkdir()
    for part, text in TU_FILES.items():
        if part not in skip:
            (directory / f"{name}_{part}.txt").write_text(text)
    return directory


def test_tu_loader_round_trip(tmp_path):
    graphs, labels = load_tu_dataset(write_tu(tmp_path))
    assert [G.number_of_nodes() for G in graphs] == [3, 4, 3]
    assert [sorted(map(sorted, G.edges)) for G in graphs] == [
        [[0, 1], [0, 2], [1, 2]],
        [[0, 1], [1, 2], [2, 3]],
        [[0, 1]],
    ]
    assert labels.tolist() == [1, -1, 1]
    assert [graphs[0].nodes[i]["label"] for i in range(3)] == [0, 1, 2]
    assert graphs[2].nodes[2]["attributes"].tolist() == [6.0, 6.0]
    assert graphs[0].nodes[1]["attribute"] == 1.5


@pytest.mark.parametrize("missing", ["A", "graph_indicator", "graph_labels"])
def test_tu_missing_required_file_is_named(tmp_path, missing):
    with pytest.raises(FileNotFoundError, match=f"TOY_{missing}.txt"):
        load_tu_dataset(write_tu(tmp_path, skip=(missing,)))


def test_tu_optional_files_may_be_absent(tmp_path):
    graphs, _ = load_tu_dataset(write_tu(tmp_path, skip=("node_labels", "node_attributes")))
    assert "label" not in graphs[0].nodes[0]


def test_tu_label_count_mismatch_is_one_line(tmp_path):
    directory = write_tu(tmp_path)
    (directory / "TOY_graph_labels.txt").write_text("1\n-1\n")
    with pytest.raises(ValueError, match="graph_labels has 2 lines"):
        load_tu_dataset(directory)


@pytest.mark.parametrize("task", ["generators", *PARAMETERS])
def test_generators_give_requested_classes_deterministically(task):
    graphs, labels, names = generated_graphs(task, 3, min_nodes=20, max_nodes=30, seed=7)
    again, _, _ = generated_graphs(task, 3, min_nodes=20, max_nodes=30, seed=7)
    other, _, _ = generated_graphs(task, 3, min_nodes=20, max_nodes=30, seed=8)
    classes = len(GENERATORS) if task == "generators" else len(PARAMETERS[task][1])
    assert len(names) == classes and np.bincount(labels).tolist() == [3] * classes
    assert all(20 <= G.number_of_nodes() <= 30 for G in graphs)
    assert [sorted(G.edges) for G in graphs] == [sorted(G.edges) for G in again]
    assert [sorted(G.edges) for G in graphs] != [sorted(G.edges) for G in other]


def test_generators_match_their_mean_degree_and_parameters():
    graphs, labels, _ = generated_graphs("generators", 20, min_nodes=60, max_nodes=60, seed=0)
    degree = np.array([2 * G.number_of_edges() / 60 for G in graphs])
    mean_degree = [degree[labels == c].mean() for c in range(5)]
    # k ~ U[4, 8] has mean 6; the random geometric graph's boundary lowers its degree (about 15% at n = 60)
    assert all(4.5 < k < 7.0 for k in mean_degree), mean_degree
    er, er_labels, _ = generated_graphs("er", 20, min_nodes=60, max_nodes=60, seed=0)
    density = np.array([G.number_of_edges() / 1770 for G in er])
    assert np.allclose([density[er_labels == c].mean() for c in range(5)], PARAMETERS["er"][1], atol=0.01)


def test_stratified_folds_partition_and_refuse_small_classes():
    labels = np.repeat([0, 1, 2], 10)
    folds = stratified_folds(labels, 5, seed=0)
    assert sorted(np.concatenate(folds).tolist()) == list(range(30))
    assert all(np.bincount(labels[f]).tolist() == [2, 2, 2] for f in folds)
    with pytest.raises(ValueError, match="folds=11"):
        stratified_folds(labels, 11)


def test_feature_cache_is_reused_and_keyed_on_graphs(tmp_path):
    graphs, _, _ = generated_graphs("er", 2, min_nodes=20, max_nodes=25, seed=0)
    first = cached_features(graphs, "toper", ["degree"], ["sub", "super"], tmp_path)
    assert first.shape == (10, 4)
    files = list(tmp_path.iterdir())
    assert len(files) == 1
    np.savez(files[0], features=first + 1)  # planted: a second call must read the file
    again = cached_features(graphs, "toper", ["degree"], ["sub", "super"], tmp_path)
    assert np.array_equal(again, first + 1)
    graphs[0].add_edge(0, 19 if 19 in graphs[0] else 1)
    cached_features(graphs, "toper", ["degree"], ["sub", "super"], tmp_path)
    assert len([f for f in tmp_path.iterdir() if f.suffix == ".npz"]) == 2


def test_datamodule_serves_one_stratified_fold(tmp_path):
    dm = GraphDataModule(
        task="sbm",
        graphs_per_class=10,
        min_nodes=20,
        max_nodes=30,
        folds=5,
        fold=2,
        val_folds=4,
        cache_dir=str(tmp_path),
    )
    dm.setup("fit")
    x, _ = next(iter(dm.train_dataloader()))
    assert x.shape == (24, dm.num_features) and dm.num_features == 4 and dm.num_classes == 4
    x_test, y_test = next(iter(dm.test_dataloader()))
    assert x_test.shape == (8, 4) and np.bincount(y_test.numpy()).tolist() == [2, 2, 2, 2]
    x_val, y_val = next(iter(dm.val_dataloader()))
    assert x_val.shape == (8, 4) and np.bincount(y_val.numpy()).tolist() == [2, 2, 2, 2]
    assert np.allclose(x_val.numpy(), dm.features[dm.val_index].astype(np.float32))


def test_validation_is_an_inner_fold_of_the_training_part(tmp_path):
    """Validation (what val/acc, a checkpoint monitor or early stopping select on) never holds a test graph: it is
    a stratified part of the training folds, and train, validation and test partition the collection."""
    dm = GraphDataModule(
        task="er",
        graphs_per_class=10,
        min_nodes=20,
        max_nodes=25,
        folds=5,
        fold=1,
        val_folds=4,
        cache_dir=str(tmp_path),
    )
    dm.setup("fit")
    train, val, test = dm.train_index, dm.val_index, dm.test_index
    assert set(val).isdisjoint(test) and set(val).isdisjoint(train) and set(train).isdisjoint(test)
    assert sorted([*train, *val, *test]) == list(range(50))
    outer_train = np.setdiff1d(np.arange(50), stratified_folds(dm.labels, 5, seed=0)[1])
    assert set(val) <= set(outer_train) and set(train) <= set(outer_train)
    assert np.bincount(dm.labels[val]).tolist() == [2] * 5  # 8 training graphs per class, a quarter validates
    with pytest.raises(ValueError, match="val_folds=9 is invalid"):  # 8 training graphs per class < 9 folds
        GraphDataModule(task="er", graphs_per_class=10, folds=5, cache_dir=None).setup("fit")


def test_datamodule_reads_a_tu_directory(tmp_path):
    dm = GraphDataModule(task="tu", path=str(write_tu(tmp_path)), folds=2, cache_dir=None)
    with pytest.raises(ValueError, match="folds=2"):  # one graph of label -1 cannot fill two folds
        dm.setup("fit")


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"fold": 3, "folds": 3}, "fold=3"),
        ({"features": "nope"}, "features='nope'"),
        ({"graphs_per_class": 0}, "graphs_per_class=0"),
        ({"val_folds": 1}, "val_folds=1"),
    ],
)
def test_datamodule_bad_arguments(arguments, message):
    with pytest.raises(ValueError, match=message):
        GraphDataModule(**arguments)


def test_datamodule_features_share_the_dataset_thresholds(tmp_path):
    """The served vectors are toper_dataset_features of the collection (one threshold set for all graphs, the
    paper's protocol), not a per-graph loop: a graph whose least degree lies above the dataset's least gains the
    empty-subgraph point (0, 0) from the shared thresholds, which moves its line."""
    dm = GraphDataModule(
        task="er", graphs_per_class=4, min_nodes=20, max_nodes=30, folds=2, val_folds=2, cache_dir=str(tmp_path)
    )
    dm.setup("fit")
    expected = toper_dataset_features(dm.graphs, ("degree",), levels=("sub", "super"))
    assert np.array_equal(dm.features, expected)
    per_graph = np.stack([toper_features(G, ("degree",), levels=("sub", "super")) for G in dm.graphs])
    least = np.array([min(d for _, d in G.degree) for G in dm.graphs])
    moved = least > least.min()
    assert moved.any() and not np.allclose(per_graph[moved], expected[moved])
    x, _ = next(iter(dm.test_dataloader()))
    assert np.allclose(x.numpy(), expected[dm.test_index].astype(np.float32))


def test_a_bad_graph_of_the_collection_is_named(tmp_path):
    """The DataModule's feature path says which graph of the collection fails, on one line."""
    graphs, _, _ = generated_graphs("er", 2, min_nodes=20, max_nodes=25, seed=0)
    graphs[3] = nx.empty_graph(5)
    with pytest.raises(ValueError, match=r"^graph 3: G has no edges: the edge filtration 'forman'") as error:
        cached_features(graphs, "toper", ["degree", "forman"], ["sub"], tmp_path)
    assert "\n" not in str(error.value) and not list(tmp_path.iterdir())
