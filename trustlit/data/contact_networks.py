"""Contact networks for the vaccination methods (:mod:`trustlit.privacy.vaccination`): networkx's small social
graphs, seeded random graphs at 1,000 / 10,000 nodes, a BTER-style generator, and users' own edge lists.

Graphs (:func:`contact_network`), all simple, undirected and unweighted, nodes relabelled 0..n-1:

- ``karate`` (34 nodes), ``les_miserables`` (77), ``florentine`` (15), ``davis`` (32, the bipartite women-events
  graph): networkx's built-in graphs, weights dropped;
- ``barabasi_albert``: preferential attachment, ``m`` = 3 edges per new node;
- ``chung_lu``: expected degrees w_i ∝ (i + 1)^(-1 / (γ - 1)) with γ = 2.5 and mean 10, capped at sqrt(sum w)
  (so every edge probability w_i w_j / sum w is <= 1), then networkx's ``expected_degree_graph``;
- ``bter``: block two-level Erdős–Rényi (Seshadhri, Kolda, Pinar 2012) with the vaccination paper's parameters
  (its Table 1: "BTER with power-law degree (γ = 0.5, ρ = 0.95, η = 0.05)", 1,000 nodes, 31,530-31,621 edges;
  Table 2 also uses γ = 0.3, ``bter_gamma``). The paper names the parameters, not the formulas; our reading:
  degrees drawn with P(d) ∝ d^(-γ) on 1..d_max, d_max the smallest giving a mean degree >= 63.1 (the paper's edge
  counts), and clustering targets c_d = ρ exp(-η (d - 1)). Nodes sorted by degree form affinity blocks of d + 1
  nodes (d the block's smallest degree), each an Erdős–Rényi graph of density c_d^(1/3); the degree left over
  ("excess") is wired by Chung–Lu.
- ``edge_list``: a local file (``path``), one ``u v`` pair a line (more columns, e.g. weights, are ignored; ``#``
  starts a comment); duplicate pairs collapse, self-loops are refused.

:class:`ContactNetworkDataModule` hands one graph to an analysis module: its test loader yields one batch
``{"edge_index": LongTensor [2, E], "num_nodes": n, "name": str}`` (each undirected edge once, u < v).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Literal

import lightning as L
import networkx as nx
import numpy as np
import torch
from torch.utils.data import DataLoader

from trustlit.hparams import NonNegativeInt, PositiveInt, check_arguments

GraphName = Literal[
    "karate", "les_miserables", "florentine", "davis", "barabasi_albert", "chung_lu", "bter", "edge_list"
]
BUILT_IN = {
    "karate": nx.karate_club_graph,
    "les_miserables": nx.les_miserables_graph,
    "florentine": nx.florentine_families_graph,
    "davis": nx.davis_southern_women_graph,
}
GENERATED = ("barabasi_albert", "chung_lu", "bter")
CHUNG_LU_EXPONENT = 2.5
MEAN_DEGREE = 10.0
BTER_RHO, BTER_ETA = 0.95, 0.05  # the paper's Table 1: clustering targets c_d = ρ exp(-η (d - 1))
BTER_MEAN_DEGREE = 63.1  # 2 x 31,550 edges / 1,000 nodes (the paper's Table 1)


def simple_graph(G: nx.Graph) -> nx.Graph:
    """An unweighted simple undirected copy of ``G`` with nodes 0..n-1 (in ``G``'s node order)."""
    index = {node: i for i, node in enumerate(G.nodes)}
    H = nx.Graph()
    H.add_nodes_from(range(len(index)))
    H.add_edges_from((index[u], index[v]) for u, v in G.edges if u != v)
    return H


def chung_lu_weights(n: int) -> np.ndarray:
    """Power-law expected degrees (exponent γ = 2.5, mean 10), capped at sqrt(sum w)."""
    w = (np.arange(n) + 1.0) ** (-1.0 / (CHUNG_LU_EXPONENT - 1))
    w *= MEAN_DEGREE * n / w.sum()
    return np.minimum(w, math.sqrt(w.sum()))


def chung_lu(n: int, seed: int) -> nx.Graph:
    return nx.expected_degree_graph(chung_lu_weights(n).tolist(), seed=seed, selfloops=False)


def bter_degrees(n: int, gamma: float, rng: np.random.Generator) -> np.ndarray:
    """n degrees drawn with P(d) ∝ d^(-γ) on 1..d_max, d_max the smallest with mean >= :data:`BTER_MEAN_DEGREE`
    (capped at n - 1)."""
    support = np.arange(1, n, dtype=np.float64)
    weights = support**-gamma
    means = np.cumsum(support * weights) / np.cumsum(weights)
    top = min(int(np.searchsorted(means, min(BTER_MEAN_DEGREE, means[-1]))), n - 2)
    p = weights[: top + 1] / weights[: top + 1].sum()
    return rng.choice(support[: top + 1].astype(np.int64), size=n, p=p)


def bter(n: int, seed: int, gamma: float = 0.5) -> nx.Graph:
    """The BTER graph of the module docstring (power-law exponent ``gamma``)."""
    rng = np.random.default_rng(seed)
    degree = bter_degrees(n, gamma, rng)
    order = np.argsort(degree, kind="stable")
    G = nx.Graph()
    G.add_nodes_from(range(n))
    excess = degree.astype(np.float64)
    start = 0
    while start < n:
        d = int(degree[order[start]])
        block = order[start : start + d + 1]
        start += d + 1
        if d < 2 or block.size < 2:
            continue
        density = (BTER_RHO * math.exp(-BTER_ETA * (d - 1))) ** (1 / 3)
        u, v = np.triu_indices(block.size, k=1)
        keep = rng.random(u.size) < density
        G.add_edges_from(zip(block[u[keep]].tolist(), block[v[keep]].tolist(), strict=True))
        excess[block] = np.maximum(excess[block] - density * (block.size - 1), 0)
    outer = nx.expected_degree_graph(excess.tolist(), seed=int(rng.integers(2**31)), selfloops=False)
    G.add_edges_from(outer.edges)
    return G


def load_edge_list(path: str | Path) -> nx.Graph:
    """An undirected graph from a text file of ``u v`` lines (module docstring); nodes relabelled 0..n-1 in order of
    first appearance. Integer labels are kept as their order of appearance, not their values."""
    path = Path(path).expanduser()
    if not path.is_file():
        raise FileNotFoundError(f"edge list not found: {path}")
    G = nx.Graph()
    index: dict[str, int] = {}
    with path.open(encoding="utf-8") as lines:
        for number, line in enumerate(lines, start=1):
            fields = line.split("#", 1)[0].replace(",", " ").split()
            if not fields:
                continue
            if len(fields) < 2:
                raise ValueError(f"{path}:{number}: malformed line {line.strip()!r}, expected two node names 'u v'")
            u, v = (index.setdefault(name, len(index)) for name in fields[:2])
            if u == v:
                raise ValueError(f"{path}:{number}: self-loop at node {fields[0]!r}, contact networks have none")
            G.add_edge(u, v)
    if G.number_of_nodes() == 0:
        raise ValueError(f"{path}: no edges found, expected 'u v' lines")
    return G


def contact_network(
    name: str, *, nodes: int = 1000, seed: int = 0, path: str | Path | None = None, bter_gamma: float = 0.5
) -> nx.Graph:
    """The graph ``name`` (module docstring); ``nodes`` and ``seed`` apply to the generated ones, ``path`` to
    ``edge_list``, ``bter_gamma`` (the degree exponent γ) to ``bter``."""
    if name in BUILT_IN:
        return simple_graph(BUILT_IN[name]())
    if name == "edge_list":
        if path is None:
            raise ValueError("graph='edge_list' needs path=<a local edge-list file>")
        return load_edge_list(path)
    if name not in GENERATED:
        valid = ", ".join([*BUILT_IN, *GENERATED, "edge_list"])
        raise ValueError(f"graph={name!r} is invalid, expected one of {valid}")
    if isinstance(nodes, bool) or not isinstance(nodes, int) or nodes < 10:
        raise ValueError(f"nodes={nodes!r} is invalid, expected an integer >= 10 for a generated graph")
    if name == "barabasi_albert":
        return nx.barabasi_albert_graph(nodes, 3, seed=seed)
    if name == "chung_lu":
        return chung_lu(nodes, seed)
    if isinstance(bter_gamma, bool) or not isinstance(bter_gamma, int | float) or not 0 <= bter_gamma <= 5:
        raise ValueError(f"bter_gamma={bter_gamma!r} is invalid, expected a degree exponent in [0, 5]")
    return bter(nodes, seed, float(bter_gamma))


def edge_index(G: nx.Graph) -> torch.Tensor:
    """[2, E] int64, each undirected edge once as (min, max)."""
    edges = np.array([sorted(edge) for edge in G.edges], dtype=np.int64).reshape(-1, 2)
    return torch.from_numpy(edges.T.copy())


def graph_from_batch(batch: dict[str, Any]) -> nx.Graph:
    """The graph a :class:`ContactNetworkDataModule` batch describes."""
    G = nx.Graph()
    G.add_nodes_from(range(int(batch["num_nodes"])))
    G.add_edges_from(batch["edge_index"].t().tolist())
    return G


class ContactNetworkDataModule(L.LightningDataModule):
    """One contact network for ``trustlit test`` (module docstring).

    Args:
        graph: a name of :func:`contact_network`.
        nodes: size of a generated graph (``barabasi_albert``, ``chung_lu``, ``bter``).
        seed: seeds a generated graph.
        path: the file of ``graph: edge_list``.
    """

    def __init__(
        self, graph: GraphName = "karate", nodes: PositiveInt = 1000, seed: NonNegativeInt = 0, path: str | None = None
    ) -> None:
        super().__init__()
        check_arguments(ContactNetworkDataModule.__init__, locals())
        self.save_hyperparameters()
        self.graph: nx.Graph | None = None

    def setup(self, stage: str | None = None) -> None:
        if self.graph is None:
            hp = self.hparams
            self.graph = contact_network(hp.graph, nodes=int(hp.nodes), seed=int(hp.seed), path=hp.path)

    def test_dataloader(self) -> DataLoader:
        self.setup("test")
        item = {"edge_index": edge_index(self.graph), "num_nodes": self.graph.number_of_nodes(), "name": self.name}
        return DataLoader([item], batch_size=None)

    @property
    def name(self) -> str:
        hp = self.hparams
        if hp.graph in GENERATED:
            return f"{hp.graph}_{hp.nodes}"
        return Path(hp.path).stem if hp.graph == "edge_list" else hp.graph
