"""TopER, the topological evolution rate of a graph: the least-squares line through (|V_i|, |E_i|) of a filtration.

Tola, Taiwo, Akcora, Coskunuzer, "TopER: Topological Embeddings in Graph Representation Learning" (NeurIPS 2025,
arXiv 2410.01778; released code AstritTola/TopER, PyPI ``toper``). For a filtration function f and thresholds
t_1 < ... < t_n:

- node f, sublevel: V_i = {v : f(v) <= t_i}, E_i = the edges with both ends in V_i (an edge enters at
  max(f(u), f(v))); superlevel: V_i = {v : f(v) >= t_i} (an edge enters at min(f(u), f(v))), thresholds descending;
- edge g, sublevel: E_i = {e : g(e) <= t_i}, V_i = the endpoints of E_i (a node enters at the least g of its
  edges); superlevel: g(e) >= t_i;
- x_i = |V_i|, y_i = |E_i|. Repeated points are refined as the paper's appendix B.1 and the released code do:
  node filtrations keep one point per distinct y, at the mean of its x; edge filtrations one point per distinct
  x, at the mean of its y;
- pivot a and growth b minimise sum_i (a + b x_i - y_i)^2 over the refined points. TE_f(G) = (a, b).

``toper_features`` returns (a, b) for each filtration in order and, within it, for each level in order:
[a_{f1,l1}, b_{f1,l1}, a_{f1,l2}, b_{f1,l2}, a_{f2,l1}, ...]; ``feature_names`` names those columns.
Counts are cumulative counts: every node and edge entry value is bucketed into the thresholds (``np.searchsorted``)
and counted per (graph, threshold), all graphs of a dataset at once: O((|V| + |E|) log n) plus O(n) per graph.

Notes: docs/methods/toper.md
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal, TypeVar

import networkx as nx
import numpy as np

from trustlit.graphs.filtrations import Filtration, GraphIndex, resolve_filtration

__all__ = ["PAPER_THRESHOLDS", "feature_names", "fit_line", "toper_dataset_features", "toper_features"]

Level = Literal["sub", "super"]
LEVELS: tuple[Level, ...] = ("sub", "super")
ThresholdSpec = int | Sequence[float] | np.ndarray | None
Thresholds = ThresholdSpec | Mapping[str, ThresholdSpec]
FiltrationSpec = str | Filtration
T = TypeVar("T")

# The released code's threshold count: the distinct filtration values of the dataset, reduced to 501 when more.
PAPER_THRESHOLDS = 501
# Graphs x thresholds counted at once by toper_dataset_features (a few int64 arrays of this size).
_COUNTS_PER_CHUNK = 2_000_000


def toper_features(
    G: nx.Graph,
    filtrations: FiltrationSpec | Sequence[FiltrationSpec] = ("degree",),
    *,
    levels: Level | Sequence[Level] = LEVELS,
    thresholds: Thresholds = None,
) -> np.ndarray:
    """The TopER vector of one graph: (pivot a, growth b) per filtration and level, shape [2 * F * L].

    ``thresholds``: None = the paper's choice, the distinct values of f on G (501 evenly spaced order statistics of
    them when there are more); an int n = n such order statistics; a sequence = those thresholds; a mapping from
    filtration name to any of these. Filtrations: names of ``trustlit.graphs.filtrations.FILTRATIONS``,
    ``"node:<attribute>"``, ``"edge:<attribute>"`` or ``Filtration`` objects.

    Notes: docs/methods/toper.md
    """
    return toper_dataset_features([G], filtrations, levels=levels, thresholds=thresholds)[0]


def toper_dataset_features(
    graphs: Sequence[nx.Graph],
    filtrations: FiltrationSpec | Sequence[FiltrationSpec] = ("degree",),
    *,
    levels: Level | Sequence[Level] = LEVELS,
    thresholds: Thresholds = None,
) -> np.ndarray:
    """TopER vectors of a dataset, [n_graphs, 2 * F * L], with one threshold set per filtration shared by all
    graphs: None = the released code's protocol, the distinct values of f over the whole dataset (reduced to 501
    order statistics when more); int / sequence / mapping as in ``toper_features``.

    Notes: docs/methods/toper.md
    """
    chosen = _filtrations(filtrations)
    chosen_levels = _levels(levels)
    specs = _threshold_specs(thresholds, chosen)
    if len(graphs) == 0:
        raise ValueError("graphs is empty: give at least one networkx graph")
    indexes = [_per_graph(i, GraphIndex.from_graph, G) for i, G in enumerate(graphs)]
    columns = []
    for filtration in chosen:
        values = [_per_graph(i, filtration, G, index) for i, (G, index) in enumerate(zip(graphs, indexes, strict=True))]
        grid = _thresholds(values, specs[filtration.name], filtration.name)
        for level in chosen_levels:
            sign = 1.0 if level == "sub" else -1.0  # superlevel of f at t = sublevel of -f at -t
            columns.append(_pivot_growth([sign * f for f in values], indexes, filtration.on, np.sort(sign * grid)))
    return np.concatenate(columns, axis=1)


def _per_graph(i: int, function: Callable[..., T], *arguments: Any) -> T:
    """``function(*arguments)`` for graph ``i`` of a dataset; its one-line ValueError names the graph (``graph 3:
    G has no edges ...``), so a bad graph in a collection can be found."""
    try:
        return function(*arguments)
    except ValueError as error:
        raise ValueError(f"graph {i}: {error}") from None


def feature_names(
    filtrations: FiltrationSpec | Sequence[FiltrationSpec] = ("degree",), levels: Level | Sequence[Level] = LEVELS
) -> list[str]:
    """Column names of ``toper_features``: ``<filtration>_<level>_pivot``, ``<filtration>_<level>_growth``.

    Notes: docs/methods/toper.md
    """
    return [
        f"{filtration.name}_{level}_{coefficient}"
        for filtration in _filtrations(filtrations)
        for level in _levels(levels)
        for coefficient in ("pivot", "growth")
    ]


def fit_line(x: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """Least-squares (a, b) of y ~ a + b x; when all x are equal (one refined point, e.g. a constant filtration)
    the slope is undefined and we return (mean y, 0) (the released code divides by zero and returns NaN).

    Notes: docs/methods/toper.md
    """
    x = np.asarray(x, dtype=float)
    pivot, growth = _lines(x, np.asarray(y, dtype=float), np.zeros(len(x), dtype=np.int64), 1)
    return float(pivot[0]), float(growth[0])


def _lines(x: np.ndarray, y: np.ndarray, group: np.ndarray, n_groups: int) -> tuple[np.ndarray, np.ndarray]:
    """``fit_line`` of every group of points at once (centred sums, so large counts lose no precision)."""
    size = np.bincount(group, minlength=n_groups)
    mean_x = np.bincount(group, x, n_groups) / size
    mean_y = np.bincount(group, y, n_groups) / size
    dx = x - mean_x[group]
    spread = np.bincount(group, dx * dx, n_groups)
    covariance = np.bincount(group, dx * (y - mean_y[group]), n_groups)
    growth = np.divide(covariance, spread, out=np.zeros(n_groups), where=spread > 0)
    return mean_y - growth * mean_x, growth


def _pivot_growth(values: list[np.ndarray], indexes: list[GraphIndex], on: str, grid: np.ndarray) -> np.ndarray:
    """(a, b) of the sublevel filtration of every graph at the ascending thresholds ``grid``, [n_graphs, 2]: the
    graphs side by side as one disjoint union, cumulative counts per (graph, threshold), in chunks of graphs."""
    chunk = max(1, _COUNTS_PER_CHUNK // len(grid))
    return np.concatenate(
        [
            _pivot_growth_union(values[start : start + chunk], indexes[start : start + chunk], on, grid)
            for start in range(0, len(indexes), chunk)
        ]
    )


def _pivot_growth_union(values: list[np.ndarray], indexes: list[GraphIndex], on: str, grid: np.ndarray) -> np.ndarray:
    n_graphs = len(indexes)
    offsets = np.cumsum([0] + [index.n_nodes for index in indexes])
    f = np.concatenate(values)
    u = np.concatenate([index.u + offset for index, offset in zip(indexes, offsets[:-1], strict=True)])
    v = np.concatenate([index.v + offset for index, offset in zip(indexes, offsets[:-1], strict=True)])
    node_graph = np.repeat(np.arange(n_graphs), np.diff(offsets))
    edge_graph = np.repeat(np.arange(n_graphs), [index.n_edges for index in indexes])
    if on == "node":
        node_entry, edge_entry = f, np.maximum(f[u], f[v])
    else:
        edge_entry = f
        node_entry = np.full(len(node_graph), np.inf)  # a node without edges never enters an edge filtration
        np.minimum.at(node_entry, u, f)
        np.minimum.at(node_entry, v, f)
    x = _cumulative_counts(node_entry, node_graph, grid, n_graphs)
    y = _cumulative_counts(edge_entry, edge_graph, grid, n_graphs)
    return np.stack(_refined_lines(x, y, by="y" if on == "node" else "x"), axis=1)


def _cumulative_counts(entry: np.ndarray, graph: np.ndarray, grid: np.ndarray, n_graphs: int) -> np.ndarray:
    """[n_graphs, n_thresholds]: how many entry values of each graph are <= each threshold."""
    width = len(grid) + 1  # bucket len(grid): above every threshold (or never enters)
    bucket = np.searchsorted(grid, entry, side="left")  # entry <= grid[j] iff j >= bucket
    counts = np.bincount(graph * width + bucket, minlength=n_graphs * width).reshape(n_graphs, width)
    return np.cumsum(counts[:, :-1], axis=1)


def _refined_lines(x: np.ndarray, y: np.ndarray, by: str) -> tuple[np.ndarray, np.ndarray]:
    """Per row, one point per distinct value of ``by`` at the mean of the other coordinate (paper, appendix B.1),
    then the least-squares line. Counts never decrease along a row, so equal values are consecutive runs."""
    key, other = (y, x) if by == "y" else (x, y)
    starts = np.ones(key.shape, dtype=bool)
    starts[:, 1:] = key[:, 1:] != key[:, :-1]
    run = np.cumsum(starts.ravel()) - 1
    run_key = key.ravel()[starts.ravel()].astype(float)
    run_other = np.bincount(run, other.ravel()) / np.bincount(run)
    run_graph = np.repeat(np.arange(key.shape[0]), key.shape[1])[starts.ravel()]
    points = (run_other, run_key) if by == "y" else (run_key, run_other)
    return _lines(*points, run_graph, key.shape[0])


def _thresholds(values: list[np.ndarray], spec: ThresholdSpec, name: str) -> np.ndarray:
    """The threshold grid t_1 < ... < t_n of one filtration."""
    if spec is None or (isinstance(spec, int | np.integer) and not isinstance(spec, bool)):
        count = PAPER_THRESHOLDS if spec is None else int(spec)
        if count < 2:
            raise ValueError(f"thresholds for {name!r} must be at least 2 (a line needs two points), got {count}")
        distinct = np.unique(np.concatenate(values))
        if len(distinct) <= count:
            return distinct
        return distinct[np.round(np.linspace(0, len(distinct) - 1, count)).astype(int)]
    grid = np.asarray(spec, dtype=float)
    if grid.ndim != 1 or grid.size == 0 or not np.all(np.isfinite(grid)):
        raise ValueError(
            f"thresholds for {name!r} must be None, an int >= 2 or a non-empty 1-D sequence of finite numbers, "
            f"got {spec!r}"
        )
    return np.unique(grid)


def _filtrations(filtrations: FiltrationSpec | Sequence[FiltrationSpec]) -> list[Filtration]:
    if isinstance(filtrations, str | Filtration):
        filtrations = (filtrations,)
    chosen = [resolve_filtration(spec) for spec in filtrations]
    if not chosen:
        raise ValueError("filtrations is empty: name at least one, e.g. ('degree',)")
    return chosen


def _levels(levels: Level | Sequence[Level]) -> list[Level]:
    chosen = [levels] if isinstance(levels, str) else list(levels)
    bad = [level for level in chosen if level not in LEVELS]
    if bad or not chosen:
        raise ValueError(f"levels must be a non-empty sequence of 'sub' and 'super', got {levels!r}")
    return chosen


def _threshold_specs(thresholds: Thresholds, filtrations: list[Filtration]) -> dict[str, ThresholdSpec]:
    names = [filtration.name for filtration in filtrations]
    if not isinstance(thresholds, Mapping):
        return dict.fromkeys(names, thresholds)
    unknown = sorted(set(thresholds) - set(names))
    if unknown:
        raise ValueError(f"thresholds names filtrations {unknown} that are not in filtrations {names}")
    return {name: thresholds.get(name) for name in names}
