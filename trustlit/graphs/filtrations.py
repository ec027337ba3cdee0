"""Filtration functions for TopER: node functions f: V -> R and edge functions g: E -> R.

Tola, Taiwo, Akcora, Coskunuzer, "TopER: Topological Embeddings in Graph Representation Learning" (NeurIPS 2025,
arXiv 2410.01778), section 2.2 and 4.1: node functions degree, closeness, degree centrality, popularity
P(v) = deg(v) + sum_{u in N(v)} deg(u) / |N(v)| and node attributes; edge functions Forman- and Ollivier-Ricci
curvature and edge weights. Betweenness is added (the paper lists it among the common node functions).

Every function maps a graph and its ``GraphIndex`` to a float array aligned with ``index.nodes`` (node functions)
or with the edge arrays ``index.u``, ``index.v`` (edge functions). ``FILTRATIONS`` names the built-in ones;
``resolve_filtration`` also accepts ``"node:<key>"`` / ``"edge:<key>"`` for attributes and a ``Filtration``.

Notes: docs/methods/toper.md
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import networkx as nx
import numpy as np
import scipy.sparse as sp
from scipy.sparse.csgraph import shortest_path

__all__ = [
    "FILTRATIONS",
    "Filtration",
    "GraphIndex",
    "betweenness",
    "edge_attribute",
    "forman_curvature",
    "node_attribute",
    "resolve_filtration",
]

# Rows of the all-sources BFS done at once by closeness: CHUNK x n float64 distances stay below ~100 MB at n = 1e5.
_CLOSENESS_CHUNK = 128
# Candidate triangles tested at once by edge_triangles (a few int64 arrays of this length).
_WEDGE_CHUNK = 4_000_000


@dataclass(frozen=True)
class GraphIndex:
    """A networkx graph as integer arrays: ``nodes[i]`` is node i, edge k joins ``u[k]`` and ``v[k]``.

    Notes: docs/methods/toper.md
    """

    nodes: list
    u: np.ndarray
    v: np.ndarray

    @classmethod
    def from_graph(cls, G: nx.Graph) -> GraphIndex:
        if not isinstance(G, nx.Graph) or G.is_directed() or G.is_multigraph():
            raise ValueError(f"G must be an undirected simple networkx.Graph, got {type(G).__name__}")
        if G.number_of_nodes() == 0:
            raise ValueError("G has no nodes: TopER needs at least one node")
        nodes = list(G.nodes())
        # Every edge is read from both ends' adjacency (C-level chains, no per-edge Python) and kept once, from
        # the end of lower position; a self-loop appears once.
        n_neighbours = [len(neighbours) for _, neighbours in G.adjacency()]
        neighbours = itertools.chain.from_iterable(neighbours for _, neighbours in G.adjacency())
        if nodes != list(range(len(nodes))):  # labels that are not already positions
            neighbours = map({node: i for i, node in enumerate(nodes)}.__getitem__, neighbours)
        target = np.fromiter(neighbours, dtype=np.int64, count=sum(n_neighbours))
        source = np.repeat(np.arange(len(nodes)), n_neighbours)
        keep = source <= target
        return cls(nodes, source[keep], target[keep])

    @property
    def n_nodes(self) -> int:
        return len(self.nodes)

    @property
    def n_edges(self) -> int:
        return len(self.u)

    def degree(self) -> np.ndarray:
        """deg(v), a self-loop counting twice (as networkx counts it)."""
        return (np.bincount(self.u, minlength=self.n_nodes) + np.bincount(self.v, minlength=self.n_nodes)).astype(float)

    def adjacency(self) -> sp.csr_matrix:
        """The 0/1 symmetric adjacency matrix (a self-loop is a 1 on the diagonal)."""
        loops = self.u == self.v
        rows = np.concatenate([self.u, self.v[~loops]])
        cols = np.concatenate([self.v, self.u[~loops]])
        ones = np.ones(len(rows))
        return sp.csr_matrix((ones, (rows, cols)), shape=(self.n_nodes, self.n_nodes))

    def has_self_loops(self) -> bool:
        return bool(np.any(self.u == self.v))

    def edge_triangles(self) -> np.ndarray:
        """t(e), the number of triangles on each edge of a simple graph, by the forward algorithm: edges point from
        lower to higher (degree, position) rank, which keeps every out-list short (at most sqrt(2|E|)), and each
        triangle a < b < c is found once, at a -> b with c in out(a) and b -> c an edge, then credited to its 3 edges.
        (A @ A would hold a dense row per hub: 2.4e8 entries on a 1e5-node Barabasi-Albert graph.)
        """
        n, m = self.n_nodes, self.n_edges
        rank = np.empty(n, dtype=np.int64)
        rank[np.lexsort((np.arange(n), self.degree()))] = np.arange(n)
        swap = rank[self.u] > rank[self.v]
        low, high = np.where(swap, self.v, self.u), np.where(swap, self.u, self.v)
        keys = low * n + high
        order = np.argsort(keys)
        keys, low, high = keys[order], low[order], high[order]
        start = np.searchsorted(low, np.arange(n))
        wedges = np.bincount(low, minlength=n)[low]  # candidates c in out(a) for the edge a -> b
        cumulative = np.cumsum(wedges)
        counts = np.zeros(m, dtype=np.int64)
        first = 0
        while first < m:
            limit = cumulative[first] - wedges[first] + _WEDGE_CHUNK
            last = max(first + 1, int(np.searchsorted(cumulative, limit, side="right")))
            per = wedges[first:last]
            ab = np.repeat(np.arange(first, last), per)
            ac = start[low[ab]] + np.arange(per.sum()) - np.repeat(np.cumsum(per) - per, per)
            query = high[ab] * n + high[ac]
            bc = np.minimum(np.searchsorted(keys, query), m - 1)
            found = keys[bc] == query
            counts += np.bincount(np.concatenate([ab[found], ac[found], bc[found]]), minlength=m)
            first = last
        triangles = np.empty(m, dtype=np.int64)
        triangles[order] = counts
        return triangles


FiltrationFunction = Callable[[nx.Graph, GraphIndex], np.ndarray]


@dataclass(frozen=True)
class Filtration:
    """A named node or edge filtration function; ``simple`` ones (curvatures) reject self-loops.

    Notes: docs/methods/toper.md
    """

    name: str
    on: Literal["node", "edge"]
    values: FiltrationFunction
    simple: bool = False

    def __call__(self, G: nx.Graph, index: GraphIndex) -> np.ndarray:
        if self.on == "edge" and index.n_edges == 0:
            raise ValueError(f"G has no edges: the edge filtration {self.name!r} needs at least one edge")
        if self.simple and index.has_self_loops():
            raise ValueError(
                f"G has self-loops: the filtration {self.name!r} is defined on simple graphs "
                "(remove them with G.remove_edges_from(nx.selfloop_edges(G)))"
            )
        return np.asarray(self.values(G, index), dtype=float)


def _degree(G: nx.Graph, index: GraphIndex) -> np.ndarray:
    return index.degree()


def _degree_centrality(G: nx.Graph, index: GraphIndex) -> np.ndarray:
    """deg(v) / (n - 1); 1 for a one-node graph, as ``nx.degree_centrality``."""
    n = index.n_nodes
    return index.degree() / (n - 1) if n > 1 else np.ones(1)


def _popularity(G: nx.Graph, index: GraphIndex) -> np.ndarray:
    """P(v) = deg(v) + sum_{u in N(v)} deg(u) / |N(v)| (paper, section 2.2); P(v) = deg(v) for an isolated v."""
    degree = index.degree()
    adjacency = index.adjacency()
    n_neighbours = np.asarray(adjacency.sum(axis=1)).ravel()
    neighbour_degrees = adjacency @ degree
    return degree + np.divide(neighbour_degrees, n_neighbours, out=np.zeros_like(degree), where=n_neighbours > 0)


def _closeness(G: nx.Graph, index: GraphIndex) -> np.ndarray:
    """C(v) = 1 / sum_u d(v, u) over the nodes u reachable from v; 0 for an isolated v (released code's closeness)."""
    adjacency = index.adjacency()
    total = np.empty(index.n_nodes)
    for start in range(0, index.n_nodes, _CLOSENESS_CHUNK):
        rows = np.arange(start, min(start + _CLOSENESS_CHUNK, index.n_nodes))
        distances = shortest_path(adjacency, directed=False, unweighted=True, indices=rows)
        total[rows] = np.where(np.isfinite(distances), distances, 0.0).sum(axis=1)
    return np.divide(1.0, total, out=np.zeros_like(total), where=total > 0)


def betweenness(k: int | None = None, seed: int = 0) -> Filtration:
    """Normalised betweenness centrality (``nx.betweenness_centrality``); ``k`` samples that many source nodes
    (Brandes-Pich estimate, for large graphs), None is exact.

    Notes: docs/methods/toper.md
    """
    if k is not None and (isinstance(k, bool) or not isinstance(k, int) or k < 1):
        raise ValueError(f"k must be a positive int or None (exact betweenness), got {k!r}")

    def values(G: nx.Graph, index: GraphIndex) -> np.ndarray:
        sources = None if k is None else min(k, index.n_nodes)
        scores = nx.betweenness_centrality(G, k=sources, seed=seed)
        return np.array([scores[node] for node in index.nodes])

    return Filtration("betweenness" if k is None else f"betweenness_k{k}", "node", values)


def forman_curvature(G: nx.Graph, index: GraphIndex) -> np.ndarray:
    """Augmented Forman-Ricci curvature of an unweighted edge (u, v): F(e) = 4 - deg(u) - deg(v) + 3 t(e), t(e) the
    number of triangles on e (Samal et al. 2018; GraphRicciCurvature's default ``method="augmented"`` with unit
    weights, which the released TopER code calls).
    """
    degree = index.degree()
    return 4.0 - degree[index.u] - degree[index.v] + 3.0 * index.edge_triangles()


def _ollivier_curvature(G: nx.Graph, index: GraphIndex) -> np.ndarray:
    """Ollivier-Ricci curvature (alpha = 0.5, GraphRicciCurvature's defaults as the released code calls them) on
    the unweighted topology: edge attributes are dropped so a 'weight' attribute is never read as a length.
    """
    try:
        from GraphRicciCurvature.OllivierRicci import OllivierRicci
    except ImportError as error:
        raise ImportError(
            "the 'ollivier' filtration needs GraphRicciCurvature: pip install GraphRicciCurvature"
        ) from error
    topology = nx.Graph()
    topology.add_nodes_from(range(index.n_nodes))
    topology.add_edges_from(zip(index.u.tolist(), index.v.tolist(), strict=True))
    ricci = OllivierRicci(topology, alpha=0.5, proc=1, verbose="ERROR")
    curved = ricci.compute_ricci_curvature()
    return np.array([curved[a][b]["ricciCurvature"] for a, b in zip(index.u.tolist(), index.v.tolist(), strict=True)])


def node_attribute(key: str) -> Filtration:
    """The numeric node attribute ``key`` (e.g. atomic weight), present on every node.

    Notes: docs/methods/toper.md
    """

    def values(G: nx.Graph, index: GraphIndex) -> np.ndarray:
        missing = [node for node in index.nodes if key not in G.nodes[node]]
        if missing:
            raise ValueError(f"node attribute {key!r} is missing on node {missing[0]!r} ({len(missing)} nodes lack it)")
        return _finite(np.array([G.nodes[node][key] for node in index.nodes], dtype=float), f"node attribute {key!r}")

    return Filtration(f"node:{key}", "node", values)


def edge_attribute(key: str) -> Filtration:
    """The numeric edge attribute ``key`` (e.g. an edge weight), present on every edge.

    Notes: docs/methods/toper.md
    """

    def values(G: nx.Graph, index: GraphIndex) -> np.ndarray:
        data = [G.edges[index.nodes[a], index.nodes[b]].get(key) for a, b in zip(index.u, index.v, strict=True)]
        if any(value is None for value in data):
            raise ValueError(f"edge attribute {key!r} is missing on {sum(value is None for value in data)} edges")
        return _finite(np.array(data, dtype=float), f"edge attribute {key!r}")

    return Filtration(f"edge:{key}", "edge", values)


def _finite(values: np.ndarray, what: str) -> np.ndarray:
    if not np.all(np.isfinite(values)):
        raise ValueError(f"{what} has non-finite values (NaN or inf): a filtration needs finite numbers")
    return values


FILTRATIONS: dict[str, Filtration] = {
    "degree": Filtration("degree", "node", _degree),
    "degree_centrality": Filtration("degree_centrality", "node", _degree_centrality),
    "popularity": Filtration("popularity", "node", _popularity),
    "closeness": Filtration("closeness", "node", _closeness),
    "betweenness": betweenness(),
    "forman": Filtration("forman", "edge", forman_curvature, simple=True),
    "ollivier": Filtration("ollivier", "edge", _ollivier_curvature, simple=True),
}


def resolve_filtration(spec: str | Filtration) -> Filtration:
    """A ``Filtration`` from a registry name, ``"node:<key>"``, ``"edge:<key>"`` or a ``Filtration`` itself.

    Notes: docs/methods/toper.md
    """
    if isinstance(spec, Filtration):
        return spec
    if isinstance(spec, str):
        if spec in FILTRATIONS:
            return FILTRATIONS[spec]
        kind, _, key = spec.partition(":")
        if key and kind == "node":
            return node_attribute(key)
        if key and kind == "edge":
            return edge_attribute(key)
    valid = ", ".join(FILTRATIONS)
    raise ValueError(f"unknown filtration {spec!r}: valid are {valid}, 'node:<attribute>', 'edge:<attribute>'")
