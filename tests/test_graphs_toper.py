"""TopER features (trustlit.graphs.toper) and filtrations: hand computations, invariants, the released `toper`."""

import time
import warnings

import networkx as nx
import numpy as np
import pytest

from trustlit.graphs.filtrations import FILTRATIONS, GraphIndex, betweenness, forman_curvature
from trustlit.graphs.toper import feature_names, fit_line, toper_dataset_features, toper_features

NODE_FILTRATIONS = ("degree", "degree_centrality", "popularity", "closeness", "betweenness")
PEER_NAMES = {"degree": "degree", "deg_cen": "degree_centrality", "popularity": "popularity", "closeness": "closeness"}


def small_graphs() -> list[nx.Graph]:
    graphs = [
        nx.karate_club_graph(),
        nx.barabasi_albert_graph(20, 2, seed=1),
        nx.watts_strogatz_graph(16, 4, 0.3, seed=2),
        nx.erdos_renyi_graph(15, 0.25, seed=3),
    ]
    for G in graphs:
        for edge in G.edges:
            G.edges[edge].pop("weight", None)  # karate's weights would be read as lengths by GraphRicciCurvature
    return graphs


def with_attribute(G: nx.Graph, values: dict, key: str = "f") -> nx.Graph:
    G = G.copy()
    nx.set_node_attributes(G, values, key)
    return G


# ---- hand computations: (sub a, sub b, super a, super b) with the degree filtration ----


@pytest.mark.parametrize("leaves", [3, 5, 8])
def test_star_degree_by_hand(leaves: int) -> None:
    # sub: t=1 -> (leaves, 0), t=leaves -> (leaves+1, leaves); super: t=leaves -> (1, 0), t=1 -> (leaves+1, leaves)
    expected = [-(leaves**2), leaves, -1, 1]
    np.testing.assert_allclose(toper_features(nx.star_graph(leaves)), expected, atol=1e-9)


@pytest.mark.parametrize("n", [4, 6, 11])
def test_path_degree_by_hand(n: int) -> None:
    # sub: (2, 0), (n, n-1); super: (n-2, n-3), (n, n-1)
    growth = (n - 1) / (n - 2)
    np.testing.assert_allclose(toper_features(nx.path_graph(n)), [-2 * growth, growth, -1, 1], atol=1e-9)


@pytest.mark.parametrize("n", [3, 5, 7])
def test_clique_is_a_constant_filtration(n: int) -> None:
    # every degree is n-1: one point (n, n(n-1)/2), the documented fit (mean y, 0)
    np.testing.assert_allclose(toper_features(nx.complete_graph(n)), [n * (n - 1) / 2, 0, n * (n - 1) / 2, 0])


def test_threshold_below_the_values_adds_the_empty_graph_and_refinement_means_x() -> None:
    # thresholds {0, 1, 2} on P_6: (0, 0), (2, 0), (6, 5); y = 0 twice -> one point at x = 1, so the line is y = x - 1
    np.testing.assert_allclose(toper_features(nx.path_graph(6), levels="sub", thresholds=[0, 1, 2]), [-1, 1])


def test_edge_filtration_by_hand() -> None:
    # triangle 0-1-2 with a pendant 2-3; g: (0,1)=1, (1,2)=2, (0,2)=2, (2,3)=3
    G = nx.Graph()
    G.add_edge(0, 1, g=1.0)
    G.add_edge(1, 2, g=2.0)
    G.add_edge(0, 2, g=2.0)
    G.add_edge(2, 3, g=3.0)
    # sub: (2, 1), (3, 3), (4, 4); super: t=3 -> (2, 1), t=2 -> (4, 3), t=1 -> (4, 4) -> x = 4 twice, mean y 3.5
    sub_a, sub_b = fit_line([2, 3, 4], [1, 3, 4])
    np.testing.assert_allclose(toper_features(G, "edge:g"), [sub_a, sub_b, -1.5, 1.25], atol=1e-12)


# ---- the fit ----


def test_fit_is_exact_when_counts_are_linear() -> None:
    # a path filtered by position: V_i = {0..i}, E_i = i edges, y = x - 1 exactly in both directions
    path = with_attribute(nx.path_graph(9), {i: float(i) for i in range(9)})
    np.testing.assert_allclose(toper_features(path, "node:f"), [-1, 1, -1, 1], atol=1e-12)
    # a friendship graph filtered by blade: each blade adds 2 nodes and 3 edges, y = 1.5 x - 1.5 exactly
    friendship = nx.Graph()
    blade = {0: 0.0}
    for k in range(1, 6):
        friendship.add_edges_from([(0, 2 * k - 1), (0, 2 * k), (2 * k - 1, 2 * k)])
        blade.update({2 * k - 1: float(k), 2 * k: float(k)})
    np.testing.assert_allclose(toper_features(with_attribute(friendship, blade), "node:f", levels="sub"), [-1.5, 1.5])


def test_fit_line_matches_least_squares() -> None:
    rng = np.random.default_rng(0)
    x = rng.uniform(0, 10, 40)
    y = 3.0 + 2.0 * x + rng.normal(0, 1, 40)
    growth, pivot = np.polyfit(x, y, 1)
    np.testing.assert_allclose(fit_line(x, y), [pivot, growth])
    np.testing.assert_allclose(fit_line(x, 3.0 + 2.0 * x), [3.0, 2.0])


# ---- invariants ----


def test_superlevel_of_f_is_sublevel_of_minus_f() -> None:
    G = nx.erdos_renyi_graph(40, 0.15, seed=4)
    rng = np.random.default_rng(4)
    f = {node: float(rng.integers(0, 6)) for node in G}
    plus, minus = with_attribute(G, f), with_attribute(G, {node: -value for node, value in f.items()})
    np.testing.assert_allclose(
        toper_features(plus, "node:f", levels="super"), toper_features(minus, "node:f", levels="sub")
    )
    np.testing.assert_allclose(
        toper_features(plus, "node:f", levels="sub"), toper_features(minus, "node:f", levels="super")
    )
    for a, b in G.edges:
        G.edges[a, b]["g"] = float(rng.integers(0, 4))
    negated = G.copy()
    for a, b in negated.edges:
        negated.edges[a, b]["g"] *= -1
    np.testing.assert_allclose(
        toper_features(G, "edge:g", levels="super"), toper_features(negated, "edge:g", levels="sub")
    )


def test_invariant_under_node_relabelling() -> None:
    G = nx.barabasi_albert_graph(40, 2, seed=5)
    order = np.random.default_rng(5).permutation(40)
    relabelled = nx.relabel_nodes(G, {node: f"n{order[node]}" for node in G})
    shuffled = nx.Graph()  # same graph, other node and edge insertion orders
    shuffled.add_nodes_from(sorted(relabelled, reverse=True))
    shuffled.add_edges_from(reversed(list(relabelled.edges)))
    names = (*NODE_FILTRATIONS, "forman")
    np.testing.assert_allclose(toper_features(shuffled, names), toper_features(G, names), atol=1e-9)


def test_feature_order_is_filtration_then_level() -> None:
    G = nx.karate_club_graph()
    both = toper_features(G, ("degree", "popularity"), levels=("super", "sub"))
    np.testing.assert_allclose(both[:2], toper_features(G, "degree", levels="super"))
    np.testing.assert_allclose(both[6:], toper_features(G, "popularity", levels="sub"))
    assert feature_names(("degree", "popularity"), ("super", "sub"))[:3] == [
        "degree_super_pivot",
        "degree_super_growth",
        "degree_sub_pivot",
    ]


def test_integer_thresholds_take_evenly_spaced_distinct_values() -> None:
    path = with_attribute(nx.path_graph(9), {i: float(i) for i in range(9)})
    # 3 thresholds of 0..8: {0, 4, 8}; sublevel points (1, 0), (5, 4), (9, 8): still y = x - 1
    np.testing.assert_allclose(toper_features(path, "node:f", levels="sub", thresholds=3), [-1, 1], atol=1e-12)
    G = nx.karate_club_graph()
    assert not np.allclose(toper_features(G, "closeness", thresholds=5), toper_features(G, "closeness"))
    per_name = toper_features(G, ("degree", "closeness"), thresholds={"closeness": 5})
    np.testing.assert_allclose(per_name[4:], toper_features(G, "closeness", thresholds=5))


def test_dataset_features_in_chunks_equal_one_graph_at_a_time(monkeypatch: pytest.MonkeyPatch) -> None:
    import trustlit.graphs.toper as toper_module

    graphs = [*small_graphs(), nx.star_graph(4), nx.empty_graph(3)]
    grid = np.arange(0.0, 12.0)
    monkeypatch.setattr(toper_module, "_COUNTS_PER_CHUNK", 2 * len(grid))  # 2 graphs per chunk
    one_by_one = np.stack([toper_features(G, ("degree", "popularity"), thresholds=grid) for G in graphs])
    np.testing.assert_allclose(toper_dataset_features(graphs, ("degree", "popularity"), thresholds=grid), one_by_one)


def test_exact_betweenness_equals_sampling_every_node() -> None:
    G = nx.karate_club_graph()
    np.testing.assert_allclose(toper_features(G, betweenness(k=34)), toper_features(G, "betweenness"))


# ---- peers: GraphRicciCurvature and the released toper package ----


def test_edge_triangles_count_common_neighbours() -> None:
    for G in [*small_graphs(), nx.complete_graph(6), nx.barabasi_albert_graph(200, 6, seed=6), nx.Graph([(0, 1)])]:
        index = GraphIndex.from_graph(G)
        expected = [len(set(G[index.nodes[a]]) & set(G[index.nodes[b]])) for a, b in zip(index.u, index.v, strict=True)]
        np.testing.assert_array_equal(index.edge_triangles(), expected)


def test_forman_matches_graph_ricci_curvature() -> None:
    from GraphRicciCurvature.FormanRicci import FormanRicci

    for G in small_graphs():
        index = GraphIndex.from_graph(G)
        ours = forman_curvature(G, index)
        ricci = FormanRicci(G)
        ricci.compute_ricci_curvature()
        theirs = [
            ricci.G.edges[index.nodes[a], index.nodes[b]]["formanCurvature"]
            for a, b in zip(index.u, index.v, strict=True)
        ]
        np.testing.assert_allclose(ours, theirs)


def released_toper(graphs: list[nx.Graph], names: list[str]) -> dict:
    import toper

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return toper.main([G.copy() for G in graphs], names)


def test_node_and_forman_features_equal_the_released_toper() -> None:
    graphs = small_graphs()
    released = released_toper(graphs, [*PEER_NAMES, "fricci"])
    for theirs, ours in [*PEER_NAMES.items(), ("forricci", "forman")]:
        expected = np.concatenate([np.array(released[f"{theirs}_sub"]), np.array(released[f"{theirs}_super"])], 1)
        np.testing.assert_allclose(toper_dataset_features(graphs, ours), expected, rtol=1e-9, atol=1e-9)


def test_self_loops_count_as_in_the_released_toper() -> None:
    G = nx.barabasi_albert_graph(15, 2, seed=0)
    G.add_edges_from([(0, 0), (3, 3)])
    released = released_toper([G], ["degree", "popularity"])
    for name in ("degree", "popularity"):
        expected = np.concatenate([np.array(released[f"{name}_sub"]), np.array(released[f"{name}_super"])], 1)
        np.testing.assert_allclose(toper_features(G, name), expected[0], atol=1e-9)


def test_ollivier_equals_the_released_toper_up_to_its_rounded_thresholds() -> None:
    from toper import get_thresholds_olricci, sub_edge_feat, super_edge_feat

    G = nx.barabasi_albert_graph(16, 2, seed=1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        curved, grid = get_thresholds_olricci([G.copy()])
    expected = [
        *sub_edge_feat(1, curved, grid, "ricciCurvature")[0],
        *super_edge_feat(1, curved, grid, "ricciCurvature")[0],
    ]
    index = GraphIndex.from_graph(G)
    values = FILTRATIONS["ollivier"](G, index)
    # the released code rounds each threshold to 6 decimals, so an edge can miss its own threshold
    np.testing.assert_allclose(toper_features(G, "ollivier", thresholds=np.round(values, 6)), expected, atol=1e-9)


# ---- bad input ----


@pytest.mark.parametrize(
    ("G", "filtrations", "kwargs", "message"),
    [
        (nx.empty_graph(5), "forman", {}, "no edges"),
        (nx.empty_graph(5), "edge:g", {}, "no edges"),
        (nx.Graph([(0, 0), (0, 1)]), "forman", {}, "self-loops"),
        (nx.Graph([(0, 0), (0, 1)]), "ollivier", {}, "self-loops"),
        (nx.path_graph(4), "katz", {}, "valid are degree"),
        (nx.path_graph(4), (), {}, "filtrations is empty"),
        (nx.path_graph(4), "degree", {"levels": ("sub", "middle")}, "levels"),
        (nx.path_graph(4), "degree", {"thresholds": 1}, "at least 2"),
        (nx.path_graph(4), "degree", {"thresholds": [0.0, np.nan]}, "finite"),
        (nx.path_graph(4), "degree", {"thresholds": {"closeness": 3}}, "not in filtrations"),
        (nx.path_graph(4), "node:f", {}, "missing on node"),
        (with_attribute(nx.path_graph(2), {0: 1.0, 1: np.nan}), "node:f", {}, "non-finite"),
        (nx.DiGraph([(0, 1)]), "degree", {}, "undirected"),
        (nx.Graph(), "degree", {}, "no nodes"),
    ],
)
def test_bad_input_is_a_one_line_value_error(G, filtrations, kwargs, message) -> None:
    with pytest.raises(ValueError, match=message) as error:
        toper_features(G, filtrations, **kwargs)
    assert "\n" not in str(error.value)


@pytest.mark.parametrize(
    ("bad", "filtration", "message"),
    [
        (nx.empty_graph(4), "forman", "graph 2: G has no edges: the edge filtration 'forman'"),
        (nx.Graph([(0, 0), (0, 1)]), "forman", "graph 2: G has self-loops: the filtration 'forman'"),
        (nx.Graph(), "degree", "graph 2: G has no nodes"),
    ],
)
def test_a_bad_graph_of_a_dataset_is_named(bad, filtration, message) -> None:
    with pytest.raises(ValueError, match=f"^{message}") as error:
        toper_dataset_features([nx.path_graph(4), nx.cycle_graph(5), bad, nx.path_graph(3)], filtration)
    assert "\n" not in str(error.value)


def test_bad_sampling_size() -> None:
    with pytest.raises(ValueError, match="k must be a positive int"):
        betweenness(k=0)


def test_node_filtrations_accept_edgeless_graphs_and_self_loops() -> None:
    np.testing.assert_allclose(toper_features(nx.empty_graph(4)), [0, 0, 0, 0])
    looped = nx.Graph([(0, 0), (0, 1), (1, 2)])  # degrees 3, 2, 1: the loop counts twice and enters with node 0
    np.testing.assert_allclose(toper_features(looped, levels="sub"), fit_line([1, 2, 3], [0, 1, 3]))


@pytest.mark.slow
def test_a_sparse_graph_of_100k_nodes_takes_seconds() -> None:
    G = nx.fast_gnp_random_graph(100_000, 5e-5, seed=0)
    start = time.perf_counter()
    features = toper_features(G, ("degree", "popularity", "forman"))
    elapsed = time.perf_counter() - start
    assert np.all(np.isfinite(features)) and elapsed < 10.0, f"{elapsed:.1f} s"
