"""Differentially private vaccination on contact networks: reduce the maximum degree or the spectral radius of a
graph by removing (vaccinating) nodes, under edge-level (ε, δ)-DP.

Nguyen, Srinivasan, Valieva, Vullikanti, Wu, "Controlling the Spread of Epidemics on Networks with Differential
Privacy" (NeurIPS 2025, arXiv 2506.00745); released max-degree code github.com/alvinjwu666/dp_vaccine.

**Multi-set multi-cover** (§3.2). Sets S (one per node x, "vaccinate x") cover elements e (nodes) with
multiplicities m(S, e) >= 0; element e needs r_e units of cover. The utility of S under the remaining requirements
r is A(S) = sum_e min(m(S, e), r_e) (App. C.1.1).

- ``PrivateMulSet`` (:func:`private_mul_set`, Algorithm 5): ε' = ε / (2 ln(e / δ)); for i = 1..|S| draw a remaining
  set with probability ∝ exp(ε' A^(i)(S)), then r_e <- max(0, r_e - m(S_i, e)); the output is the permutation π.
  It is (ε, δ)-DP for instances that differ in one unit of one r_e or one m(S, e) (Lemma C.2).
- Greedy (:func:`greedy_cover`): the set of largest A(S) until every r_e = 0 (an H_q-approximation).
- An edge moves an instance by k units; group privacy runs Algorithm 5 at (ε / k, δ / (k e^((k-1) ε / k)))
  (:func:`group_privacy`, Algorithm 1 line 7 for k = 4).

**PrivateMaxDeg** (:func:`private_max_degree`, Algorithm 1): r_v = max(0, d_v - D); the set of x holds each
neighbour with m = 1 and x itself with m = ∞ (stored as d_x >= r_x: the same utilities and updates). One edge
(a, b) changes r_a, r_b, m(S_a, b), m(S_b, a) by one each: k = 4.

- implicit (``explicit=False``): every node v takes the first sets of π that cover it until r_v is met; the union
  is the vaccination set (the sets of π of positive utility when drawn); every residual degree is <= D, always.
- explicit (``explicit=True``, Algorithm 2): AboveThreshold on L(i) = max_S A^(i)(S), the largest utility left
  before step i (sensitivity 1 per unit, so ``4 ε_1`` per edge): with T = 6 ln n / ε' (ε' Algorithm 5's per-step
  scale), T' = T + Lap(2 / ε_1) and γ_i = L(i) + Lap(4 / ε_1), k is the first i with γ_i <= T' and the output is
  π(1..k). Theorem 4.3: with probability >= 1 - β, Δ(G - π(1..k)) <= D + L(k) <= D + T + α,
  α = 8 (ln n + ln(2 / β)) / ε_1 (β = 1 / n in the paper: α = (16 ln n + 8 ln 2) / ε_1); :func:`explicit_degree_bound`.
  The budget split is ours: Algorithm 1 at ε / 2 and 4 ε_1 = ε / 2 (total ε, δ).
- ``neighbours="multiset"``: the paper's experiments (Figures 2-3, Table 3) "relaxed the privacy to the multi-set
  multi-cover definition": k = 1 (Algorithm 5 and ε_1 at the unit level, not edge-level DP).

**PrivateSpectralRadius** (:func:`private_spectral_radius`, Algorithm 4, §5.2, App. D.2): by Favaron et al.,
λ(G) <= max_v sqrt(s_v), s_v = sum_{u in N(v)} d_u. Element v has r_v = max(0, s_v - ⌊ρ^2⌋); the set of x holds
each neighbour with m = d_x (removing x lowers s_v by at least d_x) and x itself with m = ∞ (stored as s_x). So the
implicit solution always has λ <= ρ. The paper counts 4 Δ units per edge (r_a, r_b, m(S_a, b), m(S_b, a) by up to
Δ each); the edge also adds one to s_w and to m(S_a, w), m(S_b, w) at every other neighbour w, so we count
4 (d_a + d_b) + 4 <= 8 Δ̄ - 4 units (:func:`spectral_units`) for a public degree bound Δ̄ (``degree_bound``,
default n - 1; ours). The explicit spectral variant is ours (the paper gives Algorithm 2 for the max degree only):
AboveThreshold at ε / 2 on λ(G - π[:i]) (sensitivity 1 per edge) over a geometric grid of prefix lengths.

**Private hitting walks** (``private_spectral_radius(..., method="walks")``, Algorithm 3, §5.1, App. D.1): the
exponential mechanism at ε' = ε / (2 ln(e / δ)) on A(v) = |{w ∈ W_4(G[V]) : v ∈ w}| (walks with 4 edges through v
in the graph left), v appended to π and removed, then AboveThreshold: θ = 4 n T^4, θ̂ = θ + Lap(2 / ε_1),
γ_i = W_4(G - π(1..i)) + Lap(4 / ε_1), output π(1..k) for the first γ_k <= θ̂. ρ^4 <= W_4 = 1ᵀA^4 1, so W_4 <= θ
bounds λ. Ours: T = ρ / (4n)^(1/4) (θ = ρ^4, the target; the paper's T = Δ^(1/2) is private and has no target);
one edge changes up to 8 Δ̄^3 walks (:func:`walk4_units`; the paper counts Δ^2), used as k in group privacy for the
exponential part at ε / 2 and as the queries' sensitivity for AboveThreshold at ε_1 = ε / 2 (total (ε, δ)).

Notes: docs/methods/private_vaccination.md
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable, Collection, Hashable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import scipy.sparse as sp
from scipy.sparse.linalg import eigsh

from trustlit.privacy.mechanisms import check_delta, check_positive

MAX_DEGREE_UNITS = 4  # units of the max-degree instance one edge changes (Algorithm 1; the released code uses 6)
MAX_EXP = math.log(sys.float_info.max)  # e^x overflows a float beyond this (group privacy's delta)
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
    """ε' = ε / (2 ln(e / δ)), the scale of each exponential-mechanism step of PrivateMulSet (Algorithm 5)."""
    return check_positive("epsilon", epsilon) / (2 * math.log(math.e / check_delta(delta)))


def group_privacy(epsilon: float, delta: float, units: int) -> tuple[float, float]:
    """(ε / k, δ / (k e^((k - 1) ε / k))): run at this, a unit-level (ε, δ)-DP mechanism is (ε, δ)-DP for inputs
    k units apart (group privacy; Algorithm 1 line 7 with k = 4, Algorithm 4 lines 4-5 with k = 4 Δ)."""
    step = epsilon / units
    exponent = (units - 1) * step
    if exponent > MAX_EXP:
        limit = MAX_EXP * units / (units - 1)
        raise ValueError(
            f"epsilon={epsilon!r} is too large for group privacy over {units} units, expected <= {limit:.4g}"
        )
    return step, delta / (units * math.exp(exponent))


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
    """PrivateMulSet's output π, with (not private) each set's utility when drawn and L(i), the largest utility of the
    sets left before step i (Algorithm 2's queries)."""

    order: np.ndarray
    gain: np.ndarray
    largest: np.ndarray

    def implicit_solution(self) -> np.ndarray:
        """The sets some element takes (the first sets of the order that cover it until its requirement is met)."""
        return self.order[self.gain > 0]


def private_mul_set(cover: MultiCover, epsilon: float, delta: float, rng: np.random.Generator) -> PrivatePermutation:
    """PrivateMulSet at (ε, δ) for instances that differ in one unit: a permutation of all sets drawn step by step
    with P(S) ∝ exp(ε' u_i(S)) (:func:`per_step_epsilon`). Once every requirement is met all utilities are 0 and
    the rest of the order is uniform: it is drawn as one shuffle (the same distribution)."""
    scale = per_step_epsilon(epsilon, delta)
    state = _CoverState(cover)
    order, gain, largest = [], [], []
    while state.r.any():
        largest.append(float(state.u.max()))  # closed sets hold u = 0 and utilities are >= 0
        s = exponential_step(state.u, scale, rng, state.open)
        gain.append(state.choose(s))
        order.append(s)
    rest = rng.permutation(np.flatnonzero(state.open))
    tail = np.zeros(rest.size)
    return PrivatePermutation(
        np.concatenate([np.array(order, dtype=np.int64), rest]),
        np.concatenate([np.array(gain), tail]),
        np.concatenate([np.array(largest), tail]),
    )


# --- the two graph objectives ------------------------------------------------------------------------------------


def max_degree_cover(graph: ContactGraph, D: int) -> MultiCover:
    """r_v = max(0, d_v - D); the set of x holds its neighbours (m = 1) and x itself (m = ∞, stored as d_x >= r_x)."""
    d = graph.degrees
    m = (graph.adjacency + sp.diags(d, dtype=np.int64)).tocsr()
    m.eliminate_zeros()
    return MultiCover(m, np.maximum(d - D, 0))


def walk2_counts(adjacency: sp.csr_matrix) -> np.ndarray:
    """s_v = sum_{u in N(v)} d_u, the number of walks of length 2 from each node (row sums of A^2)."""
    d = np.diff(adjacency.indptr).astype(np.int64)
    return adjacency @ d


def spectral_cover(graph: ContactGraph, rho: float) -> MultiCover:
    """r_v = max(0, s_v - ⌊ρ^2⌋); the set of x holds each neighbour (m = d_x) and x itself (m = ∞, stored as
    s_x >= r_x)."""
    d, s = graph.degrees, walk2_counts(graph.adjacency)
    m = (sp.diags(d, dtype=np.int64) @ graph.adjacency + sp.diags(s, dtype=np.int64)).tocsr()
    m.eliminate_zeros()
    return MultiCover(m, np.maximum(s - math.floor(rho * rho), 0))


def spectral_units(degree_bound: int) -> int:
    """Units of the spectral instance one edge (a, b) can change for degrees <= Δ̄ (d_a, d_b the degrees before it;
    self-multiplicities are ∞ and do not move): r: s_a += d_b + 1, s_b += d_a + 1 and s_w += 1 at each of the
    d_a + d_b other neighbours; m: m(S_a, b) = d_a + 1, m(S_b, a) = d_b + 1 and m(S_a, w), m(S_b, w) += 1 at the old
    neighbours. Total 4 (d_a + d_b) + 4 <= 8 Δ̄ - 4 (the paper's Algorithm 4 counts 4 Δ)."""
    return max(8 * degree_bound - 4, MAX_DEGREE_UNITS)


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


def above_threshold_alpha(n_queries: int, epsilon_1: float, beta: float) -> float:
    """α = 8 (ln k + ln(2 / β)) / ε_1: AboveThreshold over k sensitivity-1 queries stops at a query more than α on
    the wrong side of its threshold with probability <= β (Dwork & Roth 2014, Theorem 3.24; the paper's proof of
    Theorem 4.3)."""
    if not 0 < beta < 1:
        raise ValueError(f"beta={beta!r} is invalid, expected a probability in (0, 1)")
    return 8 * (math.log(n_queries) + math.log(2 / beta)) / check_positive("epsilon_1", epsilon_1)


def degree_threshold(n: int, scale: float) -> float:
    """T = 6 ln n / ε', Algorithm 2's threshold on the largest remaining utility (ε' the per-step scale)."""
    return 6 * math.log(max(n, 2)) / scale


def explicit_degree_bound(n: int, scale: float, epsilon_1: float, beta: float | None = None) -> float:
    """T + α: Algorithm 2's output has Δ(G - π(1..k)) <= D + T + α with probability >= 1 - β (β = 1 / n by default,
    the paper's choice; Theorem 4.3)."""
    queries = max(n, 2)
    return degree_threshold(n, scale) + above_threshold_alpha(queries, epsilon_1, 1 / queries if beta is None else beta)


def first_below(
    query: Callable[[int], float], indices: Sequence[int], threshold: float, epsilon_1: float, rng: np.random.Generator
) -> int:
    """AboveThreshold (App. B, Algorithm 2 lines 2-6): the first i of ``indices`` with
    query(i) + Lap(4 / ε_1) <= threshold + Lap(2 / ε_1) (the last index if none); queries are evaluated only when
    reached."""
    noisy_threshold = threshold + rng.laplace(scale=2 / epsilon_1)
    for i in indices:
        if query(i) + rng.laplace(scale=4 / epsilon_1) <= noisy_threshold:
            return int(i)
    return int(indices[-1])


def geometric_lengths(n: int) -> list[int]:
    """0, 1, ..., 9, then lengths growing by :data:`SPECTRAL_GRID_RATIO`, ending at n (data-independent)."""
    lengths = list(range(min(n, 9) + 1))
    while lengths[-1] < n:
        lengths.append(min(n, max(lengths[-1] + 1, int(lengths[-1] * SPECTRAL_GRID_RATIO))))
    return lengths


# --- Algorithm 3: private hitting walks ---------------------------------------------------------------------------


def walk4_total(adjacency: sp.csr_matrix) -> int:
    """W_4 = 1ᵀ A^4 1 = sum_v s_v^2, the number of walks with 4 edges (s = A^2 1, :meth:`WalkCounts.total`)."""
    return WalkCounts(adjacency).total()


def walk4_units(degree_bound: int) -> int:
    """Walks of length 4 that one edge (a, b) adds or removes, for degrees <= Δ̄ (in the graph that holds it): a walk
    using the edge at step j in one direction has <= Δ̄^(j-1) ways to reach it and Δ̄^(4-j) to go on, so at most
    4 · 2 · Δ̄^3 (ours; the paper's Lemma D.1 counts Δ^2)."""
    return max(8 * degree_bound**3, 1)


def walk4_threshold(n: int, rho: float) -> float:
    """θ = 4 n T^4 (Algorithm 3 line 6) with T = ρ / (4n)^(1/4), so θ = ρ^4 and W_4 <= θ gives λ <= ρ (ours: the
    paper sets T = Δ^(1/2), without a target)."""
    T = rho / (4 * n) ** 0.25
    return 4 * n * T**4


class WalkCounts:
    """The graph with some nodes removed and, for each remaining v, A(v) = the walks of length 4 through v.

    A(v) = W_4(G) - W_4(G - v) = s_v^2 + 2 (d_v (A s)_v + (A^2 s)_v - s_v d_v) - (d_v^3 + 2 d_v t_v + q_v - d_v^2)
    with t_v = (A^3)_vv and q_v = (A^4)_vv: the walks of length 2 from u ≠ v that avoid v are
    s_u - A_uv d_v - (A^2)_uv. Mat-vecs with the removed nodes masked out; t and q are updated on each removal
    from (A^2)_{·x} and (A^3)_{·x}, so a step costs O(|E|)."""

    def __init__(self, adjacency: sp.csr_matrix) -> None:
        self.a = sp.csr_matrix(adjacency, dtype=np.int64)
        self.alive = np.ones(self.a.shape[0], dtype=np.int64)
        a2 = self.a @ self.a
        self.t = np.asarray(self.a.multiply(a2).sum(axis=1)).ravel().astype(np.int64)
        self.q = np.asarray(a2.multiply(a2).sum(axis=1)).ravel().astype(np.int64)
        self._walk2: tuple[np.ndarray, np.ndarray] | None = None

    def _times(self, y: np.ndarray) -> np.ndarray:
        """A' y for the adjacency A' of the remaining graph."""
        return self.alive * (self.a @ (self.alive * y))

    def degrees_and_walk2(self) -> tuple[np.ndarray, np.ndarray]:
        """(d, s) of the remaining graph, cached until the next :meth:`remove`: a step of Algorithm 3 reads them in
        :meth:`total` and again in the next :meth:`utilities`."""
        if self._walk2 is None:
            d = self._times(np.ones_like(self.alive))
            self._walk2 = d, self._times(d)
        return self._walk2

    def total(self) -> int:
        """W_4 of the remaining graph."""
        _, s = self.degrees_and_walk2()
        return int(s @ s)

    def utilities(self) -> np.ndarray:
        """A(v) for every node (0 for the removed ones)."""
        d, s = self.degrees_and_walk2()
        a_s = self._times(s)
        through = s * s + 2 * (d * a_s + self._times(a_s) - s * d) - (d**3 + 2 * d * self.t + self.q - d * d)
        return self.alive * through

    def remove(self, x: int) -> None:
        e = np.zeros_like(self.alive)
        e[x] = 1
        neighbours = self._times(e)
        a2_x = self._times(neighbours)
        a3_x = self._times(a2_x)
        self.q -= a2_x * a2_x + neighbours * (2 * a3_x - int(neighbours.sum()))
        self.t -= 2 * neighbours * a2_x
        self.alive[x] = 0
        self.t[x] = self.q[x] = 0
        self._walk2 = None


def walk4_through(adjacency: sp.csr_matrix) -> np.ndarray:
    """A(v) = |{w ∈ W_4(G) : v ∈ w}|, the walks of length 4 that visit each node (Algorithm 3's utility)."""
    return WalkCounts(adjacency).utilities()


def _hitting_walks(
    graph: ContactGraph, rho: float, epsilon: float, delta: float, units: int, rng: np.random.Generator
) -> np.ndarray:
    """Algorithm 3 at edge-level (ε, δ): the exponential mechanism on A(v) at (ε / 2, δ) for ``units`` walks per
    edge (Algorithm 5's ε' after group privacy), interleaved with AboveThreshold at ε / 2 on W_4(G - π(1..i)) / units
    against θ / units (sensitivity 1). π is drawn only as far as the cut reads it: the same distribution as drawing
    it whole first (the cut at i depends on π(1..i) and fresh noise only)."""
    state = WalkCounts(graph.adjacency)
    scale = per_step_epsilon(*group_privacy(epsilon / 2, delta, units))
    order: list[int] = []

    def walks_after(i: int) -> float:
        while len(order) < i:
            v = exponential_step(state.utilities(), scale, rng, state.alive.astype(bool))
            state.remove(v)
            order.append(v)
        return state.total() / units

    threshold = walk4_threshold(graph.n, rho) / units
    k = first_below(walks_after, range(1, graph.n + 1), threshold, epsilon / 2, rng)
    return np.array(order[:k], dtype=np.int64)


# --- public API ---------------------------------------------------------------------------------------------------


def greedy_max_degree(G: Any, D: int) -> set[Hashable]:
    """Non-private greedy multi-cover: vaccinate the node of largest u(S) until every degree is <= D."""
    graph, D = contact_graph(G), _check_D(D)
    return graph.labels(greedy_cover(max_degree_cover(graph, D)))


def _units(neighbours: str, edge_units: int) -> int:
    if neighbours not in ("edge", "multiset"):
        raise ValueError(f"neighbours={neighbours!r} is invalid, expected 'edge' (edge-level DP) or 'multiset'")
    return edge_units if neighbours == "edge" else 1


def private_max_degree(
    G: Any,
    D: int,
    epsilon: float,
    delta: float,
    *,
    explicit: bool = True,
    seed: int = 0,
    neighbours: Literal["edge", "multiset"] = "edge",
    threshold_epsilon: float | None = None,
) -> set[Hashable]:
    """PrivateMaxDeg (Algorithm 1) at edge-level (ε, δ)-DP, k = 4 units per edge (``neighbours="multiset"``: k = 1,
    the paper's relaxed experiments). Implicit: every degree <= D. Explicit (Algorithm 2): AboveThreshold with ε_1
    on L(i), so Δ <= D + :func:`explicit_degree_bound` w.p. >= 1 - 1 / n. With ``threshold_epsilon`` = ε_1 (the
    paper's accounting) Algorithm 1 runs at ε and the total is (ε + k ε_1, δ); without it (ours) Algorithm 1 runs at
    ε / 2 and ε_1 = ε / (2 k), total (ε, δ)."""
    graph, D = contact_graph(G), _check_D(D)
    check_positive("epsilon", epsilon)
    check_delta(delta)
    units = _units(neighbours, MAX_DEGREE_UNITS)
    rng = np.random.default_rng(seed)
    cover = max_degree_cover(graph, D)
    if not explicit:
        return graph.labels(private_mul_set(cover, *group_privacy(epsilon, delta, units), rng).implicit_solution())
    if threshold_epsilon is None:
        epsilon, epsilon_1 = epsilon / 2, epsilon / (2 * units)
    else:
        epsilon_1 = check_positive("threshold_epsilon", threshold_epsilon)
    step_epsilon, step_delta = group_privacy(epsilon, delta, units)
    permutation = private_mul_set(cover, step_epsilon, step_delta, rng)
    threshold = degree_threshold(graph.n, per_step_epsilon(step_epsilon, step_delta))
    largest = permutation.largest
    k = first_below(lambda i: largest[i - 1], range(1, graph.n + 1), threshold, epsilon_1, rng)
    return graph.labels(permutation.order[:k])


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
    explicit: bool | None = None,
    degree_bound: int | None = None,
    method: Literal["degree_sums", "walks"] = "degree_sums",
) -> set[Hashable]:
    """PrivateSpectralRadius at edge-level (ε, δ)-DP for graphs of maximum degree <= ``degree_bound`` (public,
    default n - 1).

    ``method="degree_sums"`` (Algorithm 4; k = :func:`spectral_units` per edge): implicit (the default; λ <= ρ
    always) or ``explicit=True`` (ours: Algorithm 4 at ε / 2, then AboveThreshold at ε / 2 on λ over
    :func:`geometric_lengths`). ``method="walks"`` (Algorithm 3, private hitting walks; k = :func:`walk4_units`
    walks per edge): the exponential mechanism on A(v), the walks of length 4 through v, at ε / 2, and the prefix
    cut by AboveThreshold at ε / 2 on W_4 against θ = ρ^4 (:func:`walk4_threshold`); explicit only, so
    W_4 <= θ + k α w.p. >= 1 - β (α = :func:`above_threshold_alpha` at ε / 2) and λ <= W_4^(1/4)."""
    graph, rho = contact_graph(G), _check_rho(rho)
    check_positive("epsilon", epsilon)
    check_delta(delta)
    bound = graph.n - 1 if degree_bound is None else degree_bound
    if isinstance(bound, bool) or not isinstance(bound, int) or bound < graph.degrees.max(initial=0):
        raise ValueError(
            f"degree_bound={degree_bound!r} is invalid, expected an integer >= the graph's maximum degree "
            f"(a public bound; None for n - 1)"
        )
    if method not in ("degree_sums", "walks"):
        raise ValueError(f"method={method!r} is invalid, expected 'degree_sums' (Algorithm 4) or 'walks' (Algorithm 3)")
    rng = np.random.default_rng(seed)
    if method == "walks":
        if explicit is False:
            raise ValueError("explicit=False is invalid with method='walks': Algorithm 3 releases an explicit prefix")
        return graph.labels(_hitting_walks(graph, rho, epsilon, delta, walk4_units(max(bound, 1)), rng))
    units = spectral_units(max(bound, 1))
    cover = spectral_cover(graph, rho)
    if not explicit:
        return graph.labels(private_mul_set(cover, *group_privacy(epsilon, delta, units), rng).implicit_solution())
    order = private_mul_set(cover, *group_privacy(epsilon / 2, delta, units), rng).order

    def radius(i: int) -> float:
        return _spectral_radius(residual(graph, order[:i]))

    return graph.labels(order[: first_below(radius, geometric_lengths(graph.n), rho, epsilon / 2, rng)])


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
