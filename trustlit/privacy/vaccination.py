"""Differentially private vaccination on contact networks: reduce the maximum degree or the spectral radius of a
graph by removing (vaccinating) nodes, under edge-level (ε, δ)-DP.

Nguyen, Srinivasan, Valieva, Vullikanti, Wu, "Controlling the Spread of Epidemics on Networks with Differential
Privacy" (NeurIPS 2025, arXiv 2506.00745), with the released code of its max-degree experiments
(github.com/alvinjwu666/dp_vaccine: ``dp_utils.MultiSetDP``, ``lp_utils.set_dp_multisets``).

**Multi-set multi-cover.** Sets S (here: one per node x, "vaccinate x") cover elements e (nodes) with
multiplicities m(S, e) >= 0; element e needs r_e units of cover. The utility of S under the remaining requirements
r is u(S) = sum_e min(m(S, e), r_e).

- ``PrivateMulSet`` (:func:`private_mul_set`, Gupta et al. 2010's private set cover lifted to multi-sets): for
  i = 1..n pick a remaining set with probability proportional to exp(ε' u_i(S)), ε' = ε_c / (2 ln(e / δ_c)), then
  r_e <- max(0, r_e - m(S_i, e)); the output is the permutation of all sets.
- Greedy (:func:`greedy_cover`): pick the set of largest u(S) until every r_e = 0.

**PrivateMaxDeg** (:func:`private_max_degree`): elements are nodes v with r_v = max(0, d_v - D); the set of node x
holds each neighbour v of x with m = 1 and x itself with m = d_x (the released instance). One edge changes the
instance by at most 6 units (r_a, r_b, m(S_a, b), m(S_b, a), m(S_a, a), m(S_b, b) by one each), so the
permutation runs at (ε_c, δ_c) = (ε / 6, δ / 6), as the released code calls ``cover(eps / 6, delt / 6)``.

- implicit (``explicit=False``): the private output is the permutation π; every node v takes the first sets of π
  that cover it until r_v is met. The union of the taken sets is the vaccination set, equal to the sets of π whose
  utility was positive when they were drawn; every residual degree is <= D, always.
- explicit (``explicit=True``): ε is split in half. π is drawn at (ε / 2, δ) as above; AboveThreshold
  (Dwork & Roth 2014, Algorithm 1) at ε_T = ε / 2 finds the first prefix π[:i] whose residual maximum degree
  f_i = max_v d_{G - π[:i]}(v) (sensitivity 1 under an edge) is <= D: with T̂ = -D + Lap(2 / ε_T) and
  ν_i ~ Lap(4 / ε_T), it stops at the first i with -f_i + ν_i >= T̂ and releases π[:i]. With probability
  >= 1 - β the released set has maximum degree <= D + α, α = 8 (ln k + ln(2 / β)) / ε_T (:func:`explicit_bound`,
  Dwork & Roth Theorem 3.24) over the k prefix lengths asked (:func:`geometric_lengths`: 0..9, then growing by
  10 %, a data-independent grid; fewer queries than all n + 1 prefixes stop less often on noise alone).

**PrivateSpectralRadius** (:func:`private_spectral_radius`): λ(H)^2 = λ(A_H^2) <= max_v s_v(H), the largest row
sum of A_H^2, s_v = sum_{u in N(v)} d_u (the number of walks of length 2 from v; their squares sum to the number
of length-4 walks). So λ(G - R) <= ρ once every s_v(G - R) <= ⌊ρ^2⌋: element v has r_v = max(0, s_v - ⌊ρ^2⌋);
the set of node x holds each neighbour v with m = d_x (removing x deletes the d_x walks v-x-*, disjoint for
distinct x, so the cover is sufficient) and x itself with m = s_x. One edge (a, b) changes this instance by at
most 6 (d_a + d_b) + 6 <= 12 Δ̄ - 6 units for a public degree bound Δ̄ (``degree_bound``, default n - 1), so π
runs at (ε, δ) / (12 Δ̄ - 6).
The implicit solution always has λ <= ρ; the explicit one cuts π by AboveThreshold on λ(G - π[:i])
(sensitivity 1) over a geometric grid of prefix lengths.

Notes: docs/methods/private_vaccination.md
"""

from __future__ import annotations

import math
from collections.abc import Collection, Hashable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.sparse as sp
from scipy.sparse.linalg import eigsh

from trustlit.privacy.mechanisms import _check_delta, _check_positive

MAX_DEGREE_UNITS = 6  # units of the max-degree instance one edge can change (released code: eps / 6)
SPECTRAL_GRID_RATIO = 1.1  # explicit spectral cut: prefix lengths grow by this factor (plus every length < 10)


@dataclass(frozen=True)
class ContactGraph:
    """A simple undirected graph as a CSR adjacency [n, n] (0/1) and the node labels of its rows."""

    adjacency: sp.csr_matrix
    nodes: list[Hashable]

    @property
    def n(self) -> int:
        return len(self.nodes)

    @property
    def degrees(self) -> np.ndarray:
        return np.diff(self.adjacency.indptr).astype(np.int64)

    def labels(self, indices: np.ndarray) -> set[Hashable]:
        return {self.nodes[i] for i in indices.tolist()}

    def indices(self, labels: Collection[Hashable], name: str) -> np.ndarray:
        position = {node: i for i, node in enumerate(self.nodes)}
        missing = [node for node in labels if node not in position]
        if missing:
            raise ValueError(f"{name} holds {len(missing)} nodes not in the graph (e.g. {missing[0]!r})")
        return np.array(sorted(position[node] for node in labels), dtype=np.int64)


def contact_graph(G: Any) -> ContactGraph:
    """``G`` (a networkx graph) as a :class:`ContactGraph`; directed graphs, multigraphs and self-loops are refused."""
    import networkx as nx

    if not isinstance(G, nx.Graph):
        raise ValueError(f"G={type(G).__name__} is invalid, expected a networkx Graph")
    if G.is_directed():
        raise ValueError(
            "G is directed: an undirected graph is required (edge-level DP on contacts), e.g. G.to_undirected()"
        )
    if G.is_multigraph():
        raise ValueError("G is a multigraph: a simple undirected graph is required, e.g. nx.Graph(G)")
    loops = list(nx.selfloop_edges(G))
    if loops:
        raise ValueError(
            f"G has {len(loops)} self-loops (e.g. at node {loops[0][0]!r}): a simple graph without self-loops "
            "is required, e.g. G.remove_edges_from(nx.selfloop_edges(G))"
        )
    nodes = list(G.nodes)
    adjacency = nx.to_scipy_sparse_array(G, nodelist=nodes, weight=None, dtype=np.int64, format="csr")
    return ContactGraph(sp.csr_matrix(adjacency), nodes)


# --- the multi-cover instance and its two solvers -------------------------------------------------------------


@dataclass(frozen=True)
class MultiCover:
    """Multiplicities m(S, e) as a CSR [sets, elements] and requirements r_e [elements] (non-negative integers)."""

    multiplicity: sp.csr_matrix
    requirement: np.ndarray

    def utilities(self, requirement: np.ndarray | None = None) -> np.ndarray:
        """u(S) = sum_e min(m(S, e), r_e) for every set."""
        r = self.requirement if requirement is None else requirement
        m = self.multiplicity
        rows = np.repeat(np.arange(m.shape[0]), np.diff(m.indptr))
        return np.bincount(rows, weights=np.minimum(m.data, r[m.indices]), minlength=m.shape[0])


def _gather(indptr: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """Positions in the CSR arrays of every entry of ``rows`` (concatenated, row by row)."""
    starts, ends = indptr[rows], indptr[rows + 1]
    lengths = ends - starts
    if lengths.sum() == 0:
        return np.zeros(0, dtype=np.int64)
    offsets = np.repeat(starts - np.cumsum(lengths) + lengths, lengths)
    return offsets + np.arange(lengths.sum())


class _CoverState:
    """Remaining requirements and utilities, updated in O(entries touched) when a set is chosen."""

    def __init__(self, cover: MultiCover) -> None:
        self.m = cover.multiplicity
        self.columns = cover.multiplicity.T.tocsr()  # element -> the sets holding it
        self.r = cover.requirement.astype(np.int64).copy()
        self.u = cover.utilities().astype(np.float64)
        self.open = np.ones(self.m.shape[0], dtype=bool)

    def choose(self, s: int) -> float:
        """Remove set ``s``; return its utility when chosen."""
        gained = float(self.u[s])
        self.open[s] = False
        self.u[s] = 0.0
        if gained == 0:
            return gained
        lo, hi = self.m.indptr[s], self.m.indptr[s + 1]
        elements, amounts = self.m.indices[lo:hi], self.m.data[lo:hi]
        old = self.r[elements]
        new = np.maximum(old - amounts, 0)
        changed = new != old
        elements, old, new = elements[changed], old[changed], new[changed]
        self.r[elements] = new
        positions = _gather(self.columns.indptr, elements)
        owners = np.repeat(np.arange(elements.size), np.diff(self.columns.indptr)[elements])
        sets, held = self.columns.indices[positions], self.columns.data[positions]
        delta = np.minimum(held, new[owners]) - np.minimum(held, old[owners])
        np.add.at(self.u, sets, delta)
        self.u[~self.open] = 0.0
        return gained


def greedy_cover(cover: MultiCover) -> np.ndarray:
    """The greedy multi-cover: sets of largest utility (first index on ties) until every requirement is met."""
    state = _CoverState(cover)
    chosen = []
    while state.r.any():
        s = int(np.argmax(state.u))
        state.choose(s)
        chosen.append(s)
    return np.array(chosen, dtype=np.int64)


def per_step_epsilon(epsilon: float, delta: float) -> float:
    """ε' = ε / (2 ln(e / δ)), the scale of each exponential-mechanism step of PrivateMulSet (Gupta et al. 2010)."""
    return _check_positive("epsilon", epsilon) / (2 * math.log(math.e / _check_delta(delta)))


def exponential_step_probabilities(
    utility: np.ndarray, scale: float, open_sets: np.ndarray | None = None
) -> np.ndarray:
    """P(S) ∝ exp(scale * u(S)) over the open sets (0 for the others)."""
    logits = scale * np.asarray(utility, dtype=np.float64)
    if open_sets is not None:
        logits = np.where(open_sets, logits, -np.inf)
    weights = np.exp(logits - logits.max())
    return weights / weights.sum()


def exponential_step(
    utility: np.ndarray, scale: float, rng: np.random.Generator, open_sets: np.ndarray | None = None
) -> int:
    """One draw of the exponential mechanism P(S) ∝ exp(scale * u(S)) (inverse CDF of one uniform)."""
    cumulative = np.cumsum(exponential_step_probabilities(utility, scale, open_sets))
    return int(min(np.searchsorted(cumulative, rng.random() * cumulative[-1], side="right"), cumulative.size - 1))


@dataclass(frozen=True)
class PrivatePermutation:
    """PrivateMulSet's output: the order of all sets, and each set's utility when it was drawn (not private)."""

    order: np.ndarray
    gain: np.ndarray

    def implicit_solution(self) -> np.ndarray:
        """The sets some element takes (the first sets of the order that cover it until its requirement is met)."""
        return self.order[self.gain > 0]


def private_mul_set(cover: MultiCover, epsilon: float, delta: float, rng: np.random.Generator) -> PrivatePermutation:
    """PrivateMulSet at (ε, δ) for instances that differ in one unit: a permutation of all sets drawn step by step
    with P(S) ∝ exp(ε' u_i(S)) (:func:`per_step_epsilon`). Once every requirement is met all utilities are 0 and
    the rest of the order is uniform: it is drawn as one shuffle (the same distribution)."""
    scale = per_step_epsilon(epsilon, delta)
    state = _CoverState(cover)
    order, gain = [], []
    while state.r.any():
        s = exponential_step(state.u, scale, rng, state.open)
        gain.append(state.choose(s))
        order.append(s)
    rest = rng.permutation(np.flatnonzero(state.open))
    return PrivatePermutation(
        np.concatenate([np.array(order, dtype=np.int64), rest]),
        np.concatenate([np.array(gain), np.zeros(rest.size)]),
    )


# --- the two graph objectives ------------------------------------------------------------------------------------


def max_degree_cover(graph: ContactGraph, D: int) -> MultiCover:
    """r_v = max(0, d_v - D); the set of x holds its neighbours (m = 1) and x itself (m = d_x)."""
    d = graph.degrees
    m = (graph.adjacency + sp.diags(d, dtype=np.int64)).tocsr()
    m.eliminate_zeros()
    return MultiCover(m, np.maximum(d - D, 0))


def walk2_counts(adjacency: sp.csr_matrix) -> np.ndarray:
    """s_v = sum_{u in N(v)} d_u, the number of walks of length 2 from each node (row sums of A^2)."""
    d = np.diff(adjacency.indptr).astype(np.int64)
    return adjacency @ d


def spectral_cover(graph: ContactGraph, rho: float) -> MultiCover:
    """r_v = max(0, s_v - ⌊ρ^2⌋); the set of x holds each neighbour (m = d_x) and x itself (m = s_x)."""
    d, s = graph.degrees, walk2_counts(graph.adjacency)
    m = (sp.diags(d, dtype=np.int64) @ graph.adjacency + sp.diags(s, dtype=np.int64)).tocsr()
    m.eliminate_zeros()
    return MultiCover(m, np.maximum(s - math.floor(rho * rho), 0))


def spectral_units(degree_bound: int) -> int:
    """Units of the spectral instance one edge (a, b) can change for degrees <= Δ̄ (d_a, d_b the degrees before it):
    r: 2 (d_a + d_b) + 2 (s_v + 1 for each neighbour, s_a + d_b + 1, s_b + d_a + 1); m: 3 (d_a + d_b) + 4 in the sets
    of a and b, plus the self-multiplicities s_v of their d_a + d_b neighbours. Total 6 (d_a + d_b) + 6 <= 12 Δ̄ - 6."""
    return max(12 * degree_bound - 6, MAX_DEGREE_UNITS)


def _check_D(D: int) -> int:
    if isinstance(D, bool) or not isinstance(D, int | np.integer) or D < 0:
        raise ValueError(f"D={D!r} is invalid, expected an integer degree target >= 0")
    return int(D)


def _check_rho(rho: float) -> float:
    if isinstance(rho, bool) or not isinstance(rho, int | float) or not (math.isfinite(rho) and rho >= 0):
        raise ValueError(f"rho={rho!r} is invalid, expected a finite spectral-radius target >= 0")
    return float(rho)


def residual(graph: ContactGraph, removed: np.ndarray) -> sp.csr_matrix:
    """The adjacency of G with the ``removed`` nodes' edges deleted (the nodes stay, isolated)."""
    keep = np.ones(graph.n, dtype=np.int64)
    keep[removed] = 0
    kept = sp.csr_matrix(graph.adjacency.multiply(keep[:, None]).multiply(keep[None, :]))
    kept.eliminate_zeros()
    return kept


def max_degree_after(G: Any, removed: Collection[Hashable]) -> int:
    """The maximum degree of ``G`` once the ``removed`` nodes are vaccinated."""
    graph = contact_graph(G)
    a = residual(graph, graph.indices(removed, "removed"))
    return int(np.diff(a.indptr).max(initial=0)) if a.nnz else 0


def _spectral_radius(adjacency: sp.csr_matrix) -> float:
    if adjacency.nnz == 0:
        return 0.0
    if adjacency.shape[0] <= 64:
        return float(np.linalg.eigvalsh(adjacency.toarray().astype(np.float64))[-1])
    return float(eigsh(adjacency.astype(np.float64), k=1, which="LA", return_eigenvectors=False, tol=1e-8)[0])


def spectral_radius_after(G: Any, removed: Collection[Hashable]) -> float:
    """λ, the largest adjacency eigenvalue of ``G`` once the ``removed`` nodes are vaccinated."""
    graph = contact_graph(G)
    return _spectral_radius(residual(graph, graph.indices(removed, "removed")))


# --- AboveThreshold cut-off for the explicit variants --------------------------------------------------------


def explicit_bound(n_queries: int, epsilon_threshold: float, beta: float) -> float:
    """α = 8 (ln k + ln(2 / β)) / ε_T: AboveThreshold over k queries errs by more than α with probability <= β."""
    if not 0 < beta < 1:
        raise ValueError(f"beta={beta!r} is invalid, expected a probability in (0, 1)")
    return 8 * (math.log(n_queries) + math.log(2 / beta)) / _check_positive("epsilon_threshold", epsilon_threshold)


def above_threshold_cut(
    query: Any, lengths: Sequence[int], bound: float, epsilon_threshold: float, rng: np.random.Generator
) -> int:
    """The first prefix length i of ``lengths`` with -f(i) + Lap(4/ε_T) >= -bound + Lap(2/ε_T) (the last if none):
    AboveThreshold on the queries -f(i), each evaluated only when reached."""
    threshold = -bound + rng.laplace(scale=2 / epsilon_threshold)
    for i in lengths:
        if -query(i) + rng.laplace(scale=4 / epsilon_threshold) >= threshold:
            return int(i)
    return int(lengths[-1])


def prefix_max_degrees(graph: ContactGraph, order: np.ndarray) -> np.ndarray:
    """f_i = the maximum degree after removing order[:i], for i = 0..n (degree histogram, max only decreases)."""
    d = graph.degrees.copy()
    count = np.bincount(d, minlength=int(d.max(initial=0)) + 1)
    removed = np.zeros(graph.n, dtype=bool)
    top = count.size - 1
    out = np.empty(order.size + 1, dtype=np.int64)
    a = graph.adjacency
    for i, x in enumerate(order.tolist()):
        while top > 0 and count[top] == 0:
            top -= 1
        out[i] = top
        neighbours = a.indices[a.indptr[x] : a.indptr[x + 1]]
        neighbours = neighbours[~removed[neighbours]]
        np.subtract.at(count, d[neighbours], 1)
        d[neighbours] -= 1
        np.add.at(count, d[neighbours], 1)
        count[d[x]] -= 1
        count[0] += 1
        d[x] = 0
        removed[x] = True
    out[-1] = 0
    return out


def geometric_lengths(n: int) -> list[int]:
    """0, 1, ..., 9, then lengths growing by :data:`SPECTRAL_GRID_RATIO`, ending at n (data-independent)."""
    lengths = list(range(min(n, 9) + 1))
    while lengths[-1] < n:
        lengths.append(min(n, max(lengths[-1] + 1, int(lengths[-1] * SPECTRAL_GRID_RATIO))))
    return lengths


# --- public API ---------------------------------------------------------------------------------------------------


def greedy_max_degree(G: Any, D: int) -> set[Hashable]:
    """Non-private greedy multi-cover: vaccinate the node of largest u(S) until every degree is <= D."""
    graph, D = contact_graph(G), _check_D(D)
    return graph.labels(greedy_cover(max_degree_cover(graph, D)))


def private_max_degree(
    G: Any, D: int, epsilon: float, delta: float, *, explicit: bool = True, seed: int = 0
) -> set[Hashable]:
    """PrivateMaxDeg at edge-level (ε, δ)-DP: implicit (every degree <= D) or explicit (<= D + α w.p. 1 - β,
    :func:`explicit_bound` with ε_T = ε / 2 and k = len(geometric_lengths(n))) — module docstring."""
    graph, D = contact_graph(G), _check_D(D)
    _check_positive("epsilon", epsilon)
    _check_delta(delta)
    rng = np.random.default_rng(seed)
    cover = max_degree_cover(graph, D)
    if not explicit:
        order = private_mul_set(cover, epsilon / MAX_DEGREE_UNITS, delta / MAX_DEGREE_UNITS, rng)
        return graph.labels(order.implicit_solution())
    order = private_mul_set(cover, epsilon / 2 / MAX_DEGREE_UNITS, delta / MAX_DEGREE_UNITS, rng).order
    degrees = prefix_max_degrees(graph, order)
    cut = above_threshold_cut(degrees.__getitem__, geometric_lengths(graph.n), D, epsilon / 2, rng)
    return graph.labels(order[:cut])


def greedy_spectral_radius(G: Any, rho: float) -> set[Hashable]:
    """Non-private greedy multi-cover on the neighbour degree sums: afterwards λ <= ρ."""
    graph, rho = contact_graph(G), _check_rho(rho)
    return graph.labels(greedy_cover(spectral_cover(graph, rho)))


def private_spectral_radius(
    G: Any,
    rho: float,
    epsilon: float,
    delta: float,
    *,
    seed: int = 0,
    explicit: bool = False,
    degree_bound: int | None = None,
) -> set[Hashable]:
    """PrivateSpectralRadius at edge-level (ε, δ)-DP for graphs of maximum degree <= ``degree_bound`` (public,
    default n - 1): implicit (λ <= ρ always) or explicit (AboveThreshold cut on λ, ε split in half)."""
    graph, rho = contact_graph(G), _check_rho(rho)
    _check_positive("epsilon", epsilon)
    _check_delta(delta)
    bound = graph.n - 1 if degree_bound is None else degree_bound
    if isinstance(bound, bool) or not isinstance(bound, int) or bound < graph.degrees.max(initial=0):
        raise ValueError(
            f"degree_bound={degree_bound!r} is invalid, expected an integer >= the graph's maximum degree "
            f"(a public bound; None for n - 1)"
        )
    units = spectral_units(max(bound, 1))
    rng = np.random.default_rng(seed)
    cover = spectral_cover(graph, rho)
    if not explicit:
        return graph.labels(private_mul_set(cover, epsilon / units, delta / units, rng).implicit_solution())
    order = private_mul_set(cover, epsilon / 2 / units, delta / units, rng).order

    def radius(i: int) -> float:
        return _spectral_radius(residual(graph, order[:i]))

    cut = above_threshold_cut(radius, geometric_lengths(graph.n), rho, epsilon / 2, rng)
    return graph.labels(order[:cut])


# --- epidemic outcome ---------------------------------------------------------------------------------------------


def _seed_matrix(graph: ContactGraph, available: np.ndarray, seeds: Any, runs: int, rng: np.random.Generator):
    """[n, runs] initial infections: ``seeds`` random available nodes per run, or the given nodes in every run."""
    infected = np.zeros((graph.n, runs), dtype=bool)
    if isinstance(seeds, int | np.integer) and not isinstance(seeds, bool):
        if seeds < 1:
            raise ValueError(f"seeds={seeds!r} is invalid, expected a count >= 1 or a collection of nodes")
        pool = np.flatnonzero(available)
        if seeds > pool.size:
            raise ValueError(f"seeds={seeds} is invalid: only {pool.size} nodes are not vaccinated")
        keys = rng.random((pool.size, runs))
        picked = np.argpartition(keys, seeds - 1, axis=0)[:seeds]
        infected[pool[picked], np.arange(runs)[None, :]] = True
        return infected
    if isinstance(seeds, str) or not isinstance(seeds, Collection) or len(seeds) == 0:
        raise ValueError(f"seeds={seeds!r} is invalid, expected a count >= 1 or a non-empty collection of nodes")
    index = graph.indices(seeds, "seeds")
    if not available[index].all():
        raise ValueError(f"seeds: {int((~available[index]).sum())} of the given seed nodes are vaccinated (removed)")
    infected[index] = True
    return infected


def simulate_sir(
    G: Any,
    removed: Collection[Hashable],
    beta: float,
    gamma: float,
    *,
    seeds: int | Collection[Hashable],
    runs: int,
    seed: int = 0,
) -> float:
    """Mean final outbreak fraction (ever infected / n) of a discrete-time SIR on ``G`` with ``removed`` vaccinated.

    Each step every infected node infects each susceptible neighbour independently with probability β
    (P(infected) = 1 - (1 - β)^k with k infected neighbours), then recovers with probability γ. Vaccinated nodes are
    never infected. ``seeds``: how many random non-vaccinated nodes start infected (per run), or which ones.
    Vectorised over ``runs`` independent runs, seeded by ``seed``.
    """
    graph = contact_graph(G)
    for name, value in (("beta", beta), ("gamma", gamma)):
        if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 1:
            raise ValueError(f"{name}={value!r} is invalid, expected a probability in [0, 1]")
    if gamma == 0:
        raise ValueError("gamma=0 is invalid, expected a recovery probability in (0, 1] (the outbreak must end)")
    if isinstance(runs, bool) or not isinstance(runs, int | np.integer) or runs < 1:
        raise ValueError(f"runs={runs!r} is invalid, expected an integer >= 1")
    available = np.ones(graph.n, dtype=bool)
    available[graph.indices(removed, "removed")] = False
    if not available.any():
        return 0.0
    rng = np.random.default_rng(seed)
    infected = _seed_matrix(graph, available, seeds, int(runs), rng)
    susceptible = available[:, None] & ~infected
    ever = infected.copy()
    a = graph.adjacency.astype(np.float32)
    log_escape = math.log1p(-beta) if beta < 1 else -math.inf
    while infected.any():
        pressure = a @ infected.astype(np.float32)  # infected neighbours per node and run
        p = -np.expm1(pressure * log_escape) if beta < 1 else (pressure > 0).astype(np.float64)
        new = susceptible & (rng.random(susceptible.shape) < p)
        infected &= rng.random(infected.shape) >= gamma
        infected |= new
        susceptible &= ~new
        ever |= new
    return float(ever.sum(axis=0).mean() / graph.n)
