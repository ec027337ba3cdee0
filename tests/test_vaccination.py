"""Private vaccination (trustlit/privacy/vaccination.py): hand-made covers, guarantees over seeds, the privacy of one
exponential-mechanism step (Monte Carlo with Clopper–Pearson bounds), SIR closed cases, bad input, the contact
networks and the analysis module under a Trainer."""

from __future__ import annotations

import itertools
import json
import math

import networkx as nx
import numpy as np
import pytest
from helpers import quiet_trainer

from trustlit.audit.bounds import cp_lower, cp_upper
from trustlit.data.contact_networks import ContactNetworkDataModule, contact_network, graph_from_batch, load_edge_list
from trustlit.privacy.vaccination import (
    MAX_DEGREE_UNITS,
    WalkCounts,
    above_threshold_alpha,
    contact_graph,
    degree_threshold,
    explicit_degree_bound,
    exponential_step,
    exponential_step_probabilities,
    first_below,
    geometric_lengths,
    greedy_max_degree,
    greedy_spectral_radius,
    group_privacy,
    max_degree_after,
    max_degree_cover,
    per_step_epsilon,
    private_max_degree,
    private_mul_set,
    private_spectral_radius,
    simulate_sir,
    spectral_cover,
    spectral_radius_after,
    spectral_units,
    walk4_threshold,
    walk4_through,
    walk4_total,
    walk4_units,
)

KARATE = nx.karate_club_graph()


# --- greedy against hand answers ------------------------------------------------------------------------------


def test_greedy_max_degree_on_a_star_vaccinates_the_centre():
    star = nx.star_graph(6)  # centre 0, leaves 1..6
    assert greedy_max_degree(star, 1) == {0}
    assert greedy_max_degree(star, 6) == set()


def test_greedy_max_degree_on_paths():
    # P5, D = 1: r = (0, 1, 1, 1, 0), u = (1, 2, 3, 2, 1): node 2 covers everyone
    assert greedy_max_degree(nx.path_graph(5), 1) == {2}
    # P4, D = 0 (a vertex cover): u = (2, 4, 4, 2), node 1 first (tie), then node 2 (tie with 3)
    assert greedy_max_degree(nx.path_graph(4), 0) == {1, 2}


def test_greedy_spectral_radius_on_a_star():
    # K_{1,4}: lambda = 2; rho = 1.5 needs every s_v <= 2; s = 4 everywhere; u(centre) = 2 + 4 * min(4, 2) = 10
    star = nx.star_graph(4)
    assert spectral_radius_after(star, []) == pytest.approx(2.0)
    assert greedy_spectral_radius(star, 1.5) == {0}


def test_greedy_solutions_meet_their_targets():
    for D in (0, 3, 8):
        assert max_degree_after(KARATE, greedy_max_degree(KARATE, D)) <= D
    for rho in (1.0, 2.5, 4.0):
        assert spectral_radius_after(KARATE, greedy_spectral_radius(KARATE, rho)) <= rho + 1e-9


# --- the private algorithms: guarantees over seeds ------------------------------------------------------------


@pytest.mark.parametrize("D", [0, 2, 6])
def test_implicit_max_degree_is_always_satisfied(D):
    graph = nx.barabasi_albert_graph(150, 3, seed=1)
    for seed in range(15):
        for G in (KARATE, graph):
            removed = private_max_degree(G, D, 1.0, 1e-6, explicit=False, seed=seed)
            assert max_degree_after(G, removed) <= D


def test_implicit_spectral_radius_is_always_satisfied():
    for seed, rho in itertools.product(range(10), (1.5, 3.0)):
        removed = private_spectral_radius(KARATE, rho, 2.0, 1e-6, seed=seed, degree_bound=17)
        assert spectral_radius_after(KARATE, removed) <= rho + 1e-9


def test_implicit_solution_is_the_sets_each_node_takes_first():
    """The sets of positive utility when drawn are the union over nodes v of the first sets of the permutation that
    cover v until r_v is met (the paper's implicit rule), computed here directly."""
    graph = contact_graph(KARATE)
    cover = max_degree_cover(graph, 3)
    m = cover.multiplicity.toarray()
    for seed in range(5):
        permutation = private_mul_set(cover, 1.0, 1e-3, np.random.default_rng(seed))
        taken = set()
        for v, need in enumerate(cover.requirement):
            got = 0
            for s in permutation.order:
                if got >= need:
                    break
                if m[s, v] > 0:
                    taken.add(int(s))
                    got += m[s, v]
        assert set(permutation.implicit_solution().tolist()) == taken
        assert sorted(permutation.order.tolist()) == list(range(graph.n))


def test_explicit_max_degree_within_the_papers_additive_bound_with_its_probability():
    """Theorem 4.3: Δ(G - π(1..k)) <= D + T + α with probability >= 1 - β, T = 6 ln n / ε', α = 8 (ln n + ln(2/β)) /
    ε_1, β = 1 / n. Run at the paper's relaxed (multi-set) privacy with a large ε so that the bound says something
    (D + T + α well below Δ(G)); the violation rate over 100 seeds must not be significantly above β (one-sided
    Clopper–Pearson, 99 %). The cut must also stop early (a prefix, not the whole order)."""
    G, D, epsilon, epsilon_1, delta, runs = nx.barabasi_albert_graph(300, 3, seed=2), 5, 40.0, 16.0, 0.5, 100
    bound = explicit_degree_bound(300, per_step_epsilon(epsilon, delta), epsilon_1)
    assert D + bound < max(d for _, d in G.degree) / 2
    removed = [
        private_max_degree(
            G, D, epsilon, delta, explicit=True, seed=s, neighbours="multiset", threshold_epsilon=epsilon_1
        )
        for s in range(runs)
    ]
    violations = sum(max_degree_after(G, r) > D + bound for r in removed)
    assert cp_lower(violations, runs, 0.01) <= 1 / 300
    assert max(len(r) for r in removed) < 300


def test_explicit_max_degree_at_edge_level_is_a_prefix_of_the_private_order():
    """Edge-level (ε / 2 to Algorithm 1, ε_1 = ε / 8): the output is the first k sets of the order that Algorithm 1
    draws with the same seed, and the bound T + α (β = 1 / n) holds."""
    G, D, epsilon, delta = nx.barabasi_albert_graph(200, 3, seed=5), 4, 400.0, 0.5
    step_epsilon, step_delta = group_privacy(epsilon / 2, delta, MAX_DEGREE_UNITS)
    bound = explicit_degree_bound(200, per_step_epsilon(step_epsilon, step_delta), epsilon / 8)
    order = private_mul_set(max_degree_cover(contact_graph(G), D), step_epsilon, step_delta, np.random.default_rng(7))
    removed = private_max_degree(G, D, epsilon, delta, explicit=True, seed=7)
    k = len(removed)
    assert removed == set(order.order[:k].tolist())
    assert max_degree_after(G, removed) <= D + bound


def test_first_below_is_the_first_query_under_the_threshold_when_noise_vanishes():
    queries = [9.0, 7.0, 5.0, 3.0, 1.0]
    rng = np.random.default_rng(0)
    assert first_below(lambda i: queries[i], range(5), 4.0, 1e9, rng) == 3
    assert first_below(lambda i: queries[i], range(5), 0.0, 1e9, rng) == 4  # none below: the last index


def test_group_privacy_and_thresholds_in_closed_form():
    assert group_privacy(2.0, 1e-3, 4) == pytest.approx((0.5, 1e-3 / (4 * math.exp(1.5))))
    assert group_privacy(2.0, 1e-3, 1) == (2.0, 1e-3)
    with pytest.raises(ValueError, match=r"epsilon=5000.0 is too large for group privacy over 4 units"):
        group_privacy(5000.0, 1e-3, 4)  # e^(3/4 * 5000) overflows a float
    assert per_step_epsilon(4.0, 1e-3) == pytest.approx(4 / (2 * math.log(math.e * 1e3)))
    assert degree_threshold(1000, 0.25) == pytest.approx(24 * math.log(1000))
    assert above_threshold_alpha(1000, 2.0, 1e-3) == pytest.approx((16 * math.log(1000) + 8 * math.log(2)) / 2)


def test_explicit_spectral_radius_is_a_prefix_that_usually_meets_the_target():
    removed = private_spectral_radius(KARATE, 3.0, 50.0, 1e-3, seed=0, explicit=True, degree_bound=17)
    alpha = above_threshold_alpha(len(geometric_lengths(34)), 25.0, 0.1)
    assert spectral_radius_after(KARATE, removed) <= 3.0 + alpha


def test_seeds_reproduce_and_differ():
    first = private_max_degree(KARATE, 4, 1.0, 1e-6, explicit=False, seed=3)
    assert private_max_degree(KARATE, 4, 1.0, 1e-6, explicit=False, seed=3) == first
    others = {frozenset(private_max_degree(KARATE, 4, 1.0, 1e-6, explicit=False, seed=s)) for s in range(6)}
    assert len(others) > 1
    assert simulate_sir(KARATE, first, 0.2, 0.3, seeds=2, runs=50, seed=5) == simulate_sir(
        KARATE, first, 0.2, 0.3, seeds=2, runs=50, seed=5
    )


# --- privacy of one exponential-mechanism step ----------------------------------------------------------------


def non_edges(G: nx.Graph) -> list[tuple[int, int]]:
    return [(u, v) for u, v in itertools.combinations(G.nodes, 2) if not G.has_edge(u, v)]


def with_edge(G: nx.Graph, edge: tuple[int, int]) -> nx.Graph:
    H = G.copy()
    H.add_edge(*edge)
    return H


def units_apart(a, b) -> int:
    """Unit distance of two instances; self-multiplicities are ∞ in the paper (stored finite here) and never move."""
    off_diagonal = abs(a.multiplicity - b.multiplicity).tolil()
    off_diagonal.setdiag(0)
    return int(np.abs(a.requirement - b.requirement).sum() + off_diagonal.sum())


def test_one_edge_moves_max_degree_utilities_up_by_at_most_two_and_the_instance_by_four_units():
    base = max_degree_cover(contact_graph(KARATE), 4)
    distances = []
    for edge in non_edges(KARATE):
        grown = max_degree_cover(contact_graph(with_edge(KARATE, edge)), 4)
        change = grown.utilities() - base.utilities()
        assert change.min() >= 0 and change.max() <= 2
        distances.append(units_apart(grown, base))
    assert max(distances) == MAX_DEGREE_UNITS  # Algorithm 1's 4 units, reached


def test_one_edge_moves_the_spectral_instance_by_at_most_its_units():
    base = spectral_cover(contact_graph(KARATE), 3.0)
    for edge in non_edges(KARATE)[::5]:
        grown_graph = with_edge(KARATE, edge)
        grown = spectral_cover(contact_graph(grown_graph), 3.0)
        a, b = (KARATE.degree(v) for v in edge)
        assert units_apart(grown, base) <= 4 * (a + b) + 4 <= spectral_units(max(d for _, d in grown_graph.degree))


def step_counts(G: nx.Graph, D: int, epsilon: float, delta: float, draws: int) -> np.ndarray:
    """How often each node is PrivateMulSet's first pick, over ``draws`` seeds (the whole algorithm runs)."""
    cover = max_degree_cover(contact_graph(G), D)
    firsts = [private_mul_set(cover, epsilon, delta, np.random.default_rng(s)).order[0] for s in range(draws)]
    return np.bincount(firsts, minlength=G.number_of_nodes())


def test_first_exponential_step_respects_its_epsilon_on_neighbouring_graphs():
    """P[first pick = S | G] <= e^{eps_step} P[first pick = S | G'] both ways, G' = G + one edge, eps_step = 2 eps'
    (utilities move by <= 2, all in one direction). Monte Carlo over seeds with one-sided Clopper–Pearson bounds
    (Bonferroni over every set and both directions, 99 % overall). The same counts must also tell G from G'
    (a test that cannot fail would show nothing)."""
    G = nx.Graph([(0, 1), (0, 2), (0, 3), (0, 4), (4, 5), (5, 6), (6, 7), (7, 4)])
    G_prime = with_edge(G, (0, 5))
    epsilon, delta, D, draws = 12.0, 0.05, 1, 1500
    scale = per_step_epsilon(epsilon, delta)
    bound = math.exp(2 * scale)
    exact = [
        exponential_step_probabilities(max_degree_cover(contact_graph(H), D).utilities(), scale) for H in (G, G_prime)
    ]
    assert np.max(np.maximum(exact[0] / exact[1], exact[1] / exact[0])) <= bound + 1e-12
    counts = [step_counts(H, D, epsilon, delta, draws) for H in (G, G_prime)]
    alpha = 0.01 / (2 * 2 * G.number_of_nodes())  # each ratio bound uses two one-sided bounds
    ratios = []
    for a, b in ((0, 1), (1, 0)):
        for s in range(G.number_of_nodes()):
            upper = cp_upper(int(counts[b][s]), draws, alpha)
            ratios.append(cp_lower(int(counts[a][s]), draws, alpha) / upper)
    assert max(ratios) <= bound
    assert max(ratios) > 1.0  # the step's output does depend on the edge, detectably


def test_exponential_step_samples_its_probabilities():
    utility, scale, draws = np.array([0.0, 1.0, 3.0, 3.0]), 0.7, 20000
    rng = np.random.default_rng(0)
    counts = np.bincount([exponential_step(utility, scale, rng) for _ in range(draws)], minlength=4)
    p = exponential_step_probabilities(utility, scale)
    for k, q in zip(counts, p, strict=True):
        assert cp_lower(int(k), draws, 0.001) <= q <= cp_upper(int(k), draws, 0.001)


# --- SIR ----------------------------------------------------------------------------------------------------------


def test_sir_without_transmission_infects_only_the_seeds():
    assert simulate_sir(KARATE, [], 0.0, 0.5, seeds=3, runs=20) == pytest.approx(3 / 34)


def test_sir_vaccinated_nodes_never_infect_or_get_infected():
    path = nx.path_graph(3)
    assert simulate_sir(path, {1}, 1.0, 1.0, seeds=[0], runs=10) == pytest.approx(1 / 3)
    assert simulate_sir(nx.path_graph(5), [], 1.0, 1.0, seeds=[0], runs=4) == pytest.approx(1.0)


def test_sir_complete_vaccination_gives_no_outbreak():
    assert simulate_sir(KARATE, set(KARATE.nodes), 0.9, 0.1, seeds=1, runs=10) == 0.0


def test_sir_vaccinating_hubs_shrinks_the_outbreak():
    G = nx.barabasi_albert_graph(500, 3, seed=0)
    before = simulate_sir(G, [], 0.2, 0.3, seeds=3, runs=40)
    after = simulate_sir(G, greedy_max_degree(G, 5), 0.2, 0.3, seeds=3, runs=40)
    assert after < before / 2


# --- Algorithm 3: private hitting walks ------------------------------------------------------------------------


def brute_walks(G: nx.Graph) -> tuple[int, np.ndarray]:
    """Every walk with 4 edges enumerated: their number and how many of them visit each node."""
    index = {v: i for i, v in enumerate(G.nodes)}
    walks = [[v] for v in G.nodes]
    for _ in range(4):
        walks = [[*w, u] for w in walks for u in G[w[-1]]]
    through = np.zeros(len(index), dtype=np.int64)
    for w in walks:
        through[[index[v] for v in set(w)]] += 1
    return len(walks), through


@pytest.mark.parametrize(
    ("G", "total", "through"),
    [
        (nx.path_graph(2), 2, [2, 2]),  # a-b-a-b-a and b-a-b-a-b
        (nx.path_graph(3), 12, [10, 12, 10]),  # s = (2, 2, 2); avoiding an end leaves one edge (2 walks)
        (nx.star_graph(3), 36, [36, 24, 24, 24]),  # s = (3, 3, 3, 3); avoiding a leaf leaves a 3-star (12)
        (nx.complete_graph(3), 48, [46, 46, 46]),  # 3 · 2^4 walks; avoiding a node leaves one edge (2)
    ],
)
def test_walk_counts_by_hand(G, total, through):
    adjacency = contact_graph(G).adjacency
    assert walk4_total(adjacency) == total
    assert walk4_through(adjacency).tolist() == through


@pytest.mark.parametrize("G", [KARATE, nx.gnp_random_graph(14, 0.4, seed=1), nx.florentine_families_graph()])
def test_walk_counts_and_their_updates_match_brute_force(G):
    """A(v) and W_4 in closed form against enumeration, on the whole graph and after each of 6 removals of random
    nodes (the incremental t and q updates of the hitting-walks state)."""
    G = nx.Graph(G)  # drop weights
    total, through = brute_walks(G)
    adjacency = contact_graph(G).adjacency
    assert walk4_total(adjacency) == total
    assert np.array_equal(walk4_through(adjacency), through)
    state, nodes, H = WalkCounts(adjacency), list(G.nodes), G.copy()
    for x in np.random.default_rng(0).permutation(len(nodes))[:6].tolist():
        state.remove(x)
        H.remove_edges_from(list(H.edges(nodes[x])))
        total, through = brute_walks(H)
        assert state.total() == total
        assert np.array_equal(state.utilities(), through * state.alive)


def test_four_walks_bound_the_spectral_radius():
    """λ^4 <= tr(A^4) <= W_4, so reaching W_4 <= θ = ρ^4 gives λ <= ρ (and θ = 4 n T^4 with T = ρ / (4n)^(1/4))."""
    for seed in range(5):
        G = nx.gnp_random_graph(60, 0.1, seed=seed)
        assert spectral_radius_after(G, []) ** 4 <= walk4_total(contact_graph(G).adjacency) + 1e-6
    assert walk4_threshold(100, 3.0) == pytest.approx(81.0)


def test_one_edge_moves_walk_counts_by_at_most_the_walk_units():
    """Exhaustive on karate's non-edges: an added edge adds W_4(G + e) - W_4(G) walks and moves each A(v) by 0 to
    that many (the partial-cover instance is that many elements away), always <= 8 Δ̄^3 for Δ̄ the new maximum
    degree; the paper's Δ^2 is exceeded."""
    base_total, base_through = (
        walk4_total(contact_graph(KARATE).adjacency),
        walk4_through(contact_graph(KARATE).adjacency),
    )
    added, exceeds_paper = [], False
    for edge in non_edges(KARATE):
        grown = with_edge(KARATE, edge)
        adjacency, bound = contact_graph(grown).adjacency, max(d for _, d in grown.degree)
        change = walk4_total(adjacency) - base_total
        moved = walk4_through(adjacency) - base_through
        assert 0 < change <= walk4_units(bound)
        assert moved.min() >= 0 and moved.max() <= change
        added.append(change)
        exceeds_paper |= change > bound**2
    assert exceeds_paper
    assert max(added) > walk4_units(max(d for _, d in KARATE.degree)) / 100  # the bound is not vacuous


def test_hitting_walks_meet_lemma_d1_with_its_probability():
    """Lemma D.1 / AboveThreshold accuracy: the released prefix V' has W_4(G - V') <= θ + k α with probability
    >= 1 - β, α = 8 (ln n + ln(2/β)) / (ε/2), k = 8 Δ̄^3 walks per edge, β = 1 / n; hence λ(G - V') <= (θ + k α)^(1/4).
    A 4-regular graph (Δ̄ = 4) at ε = 8 so that θ + k α is well below W_4(G); over 60 seeds the violation rate must
    not be significantly above β (one-sided Clopper–Pearson, 99 %), and the prefix must be neither empty nor all."""
    G, rho, epsilon, runs = nx.random_regular_graph(4, 200, seed=0), 6.0, 8.0, 60
    n, k = 200, walk4_units(4)
    limit = walk4_threshold(n, rho) + k * above_threshold_alpha(n, epsilon / 2, 1 / n)
    assert limit < walk4_total(contact_graph(G).adjacency) / 2
    removed = [
        private_spectral_radius(G, rho, epsilon, 1e-6, method="walks", seed=s, degree_bound=4) for s in range(runs)
    ]
    after = [walk4_total(contact_graph(G.subgraph(set(G) - r).copy()).adjacency) for r in removed]
    violations = sum(w > limit for w in after)
    assert cp_lower(violations, runs, 0.01) <= 1 / n
    assert all(spectral_radius_after(G, r) <= limit**0.25 for r, w in zip(removed, after, strict=True) if w <= limit)
    assert min(len(r) for r in removed) > 0 and max(len(r) for r in removed) < n


# --- bad input ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: greedy_max_degree(nx.DiGraph([(0, 1)]), 1), "G is directed: an undirected graph is required"),
        (lambda: greedy_max_degree(nx.Graph([(0, 0), (0, 1)]), 1), "G has 1 self-loops"),
        (lambda: greedy_max_degree(nx.MultiGraph([(0, 1), (0, 1)]), 1), "G is a multigraph"),
        (lambda: greedy_max_degree(KARATE, -1), "D=-1 is invalid, expected an integer degree target >= 0"),
        (lambda: private_max_degree(KARATE, 1.5, 1.0, 1e-6), "D=1.5 is invalid"),
        (lambda: private_max_degree(KARATE, 2, 0.0, 1e-6), "epsilon must be a finite number > 0, got 0.0"),
        (lambda: private_max_degree(KARATE, 2, 1.0, 0.0), r"delta must lie in the open interval \(0, 1\), got 0.0"),
        (lambda: private_spectral_radius(KARATE, 2.0, 1.0, 1.0), r"delta must lie in the open interval \(0, 1\)"),
        (lambda: greedy_spectral_radius(KARATE, -1.0), "rho=-1.0 is invalid"),
        (lambda: private_spectral_radius(KARATE, 2.0, 1.0, 1e-6, method="paths"), "method='paths' is invalid"),
        (
            lambda: private_spectral_radius(KARATE, 2.0, 1.0, 1e-6, method="walks", explicit=False),
            "explicit=False is invalid with method='walks'",
        ),
        (lambda: private_spectral_radius(KARATE, -2.0, 1.0, 1e-6, method="walks"), "rho=-2.0 is invalid"),
        (lambda: private_spectral_radius(KARATE, 2.0, 1.0, 1e-6, degree_bound=3), "degree_bound=3 is invalid"),
        (lambda: private_max_degree(KARATE, 2, 1.0, 1e-6, neighbours="node"), "neighbours='node' is invalid"),
        (
            lambda: private_max_degree(KARATE, 2, 1.0, 1e-6, threshold_epsilon=0.0),
            "threshold_epsilon must be a finite number > 0",
        ),
        (lambda: contact_network("bter", bter_gamma=-1.0), "bter_gamma=-1.0 is invalid"),
        (lambda: simulate_sir(KARATE, [], 1.5, 0.2, seeds=1, runs=2), "beta=1.5 is invalid"),
        (lambda: simulate_sir(KARATE, [], 0.5, 0.0, seeds=1, runs=2), "gamma=0 is invalid"),
        (lambda: simulate_sir(KARATE, [0], 0.5, 0.5, seeds=[0], runs=2), "seeds: 1 of the given seed nodes"),
        (lambda: simulate_sir(KARATE, [99], 0.5, 0.5, seeds=1, runs=2), "removed holds 1 nodes not in the graph"),
        (lambda: simulate_sir(KARATE, [], 0.5, 0.5, seeds=40, runs=2), "seeds=40 is invalid"),
    ],
)
def test_bad_input_is_refused_in_one_line(call, message):
    with pytest.raises(ValueError, match=message):
        call()


# --- contact networks ---------------------------------------------------------------------------------------------


def test_contact_networks_are_simple_and_seeded():
    sizes = {"karate": (34, 78), "les_miserables": (77, 254), "florentine": (15, 20), "davis": (32, 89)}
    for name, (n, m) in sizes.items():
        G = contact_network(name)
        assert (G.number_of_nodes(), G.number_of_edges()) == (n, m) and nx.number_of_selfloops(G) == 0
    for name in ("barabasi_albert", "chung_lu", "bter"):
        G = contact_network(name, nodes=1000, seed=4)
        assert G.number_of_nodes() == 1000 and nx.number_of_selfloops(G) == 0
        assert nx.utils.graphs_equal(G, contact_network(name, nodes=1000, seed=4))
    bter = contact_network("bter", nodes=1000, seed=0)
    assert 0.95 * 31550 <= bter.number_of_edges() <= 1.05 * 31550  # the paper's Table 1: 31,530-31,621 edges
    assert nx.average_clustering(bter) > 3 * nx.average_clustering(contact_network("chung_lu", nodes=1000))


def test_edge_list_loader_and_its_errors(tmp_path):
    path = tmp_path / "contacts.txt"
    path.write_text("# who met whom\nann bob 3\nbob cid\n\nann bob\n", encoding="utf-8")
    G = load_edge_list(path)
    assert G.number_of_nodes() == 3 and G.number_of_edges() == 2
    with pytest.raises(FileNotFoundError, match=r"missing\.txt"):
        load_edge_list(tmp_path / "missing.txt")
    path.write_text("ann bob\ncid\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"contacts\.txt:2: malformed line"):
        load_edge_list(path)
    path.write_text("ann ann\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"contacts\.txt:1: self-loop"):
        load_edge_list(path)
    with pytest.raises(ValueError, match="graph='petersen' is invalid"):
        contact_network("petersen")


def test_data_module_hands_the_graph_over():
    batch = next(iter(ContactNetworkDataModule("florentine").test_dataloader()))
    assert batch["num_nodes"] == 15 and tuple(batch["edge_index"].shape) == (2, 20) and batch["name"] == "florentine"
    assert nx.utils.graphs_equal(graph_from_batch(batch), contact_network("florentine"))


# --- the analysis module ----------------------------------------------------------------------------------------


def test_private_vaccination_runs_under_a_trainer(tmp_path):
    from trustlit.privacy.vaccination_analysis import PrivateVaccination

    module = PrivateVaccination(
        objectives=["max_degree", "spectral_radius"],
        epsilons=[1.0, 8.0],
        seeds=2,
        sir_runs=10,
        degree_target=4,
        spectral_target=3.0,
        strategies=["greedy", "private_implicit", "private_explicit", "private_walks"],
    )
    trainer = quiet_trainer(default_root_dir=tmp_path)
    trainer.test(module, datamodule=ContactNetworkDataModule("karate"))
    results = json.loads((tmp_path / "vaccination.json").read_text())
    assert (tmp_path / "vaccination.png").is_file()
    rows = results["rows"]
    strategies = {(r["objective"], r["strategy"]) for r in rows}
    assert ("max_degree", "greedy") in strategies and ("spectral_radius", "private_explicit") in strategies
    assert ("spectral_radius", "private_walks") in strategies and ("max_degree", "private_walks") not in strategies
    for row in rows:
        if row["strategy"] in ("greedy", "private_implicit") and row["objective"] == "max_degree":
            assert row["max_reached"] <= 4
        assert 0 <= row["outbreak"] <= 1
