"""TopER graph classification against the WL kernel, persistence images and the released toper package (issue #16).

Every method runs in one protocol, :func:`trustlit.graphs.classifier.nested_cross_validation`: the same generated
graphs, the same 10 stratified outer folds, hyperparameters chosen on inner folds of the training part only
(nested) and, as the released code does, on the outer test fold (test-fold). Feature time per graph is the wall
time of extracting the vectors (or the kernel) of all graphs divided by their number, one thread, the median of a
few repeats, every method timed in the same run (never read from a cache), so the speed ratios compare like with
like. The ``scaling`` section times TopER, persistence images and the toper package on 20 generator graphs of
1,000 and of 10,000 nodes.

    .venv/bin/python benchmarks/graphs.py [--sections generators,parameters,scaling] [--quick]

Stages (one JSON per task and method, the TopER stages keyed on their feature matrix; one per scaling size) are
cached under runs/benchmarks/graphs/; the scatter plot goes to docs/benchmarks/graphs_toper_scatter.png.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

if not __package__:  # run as benchmarks/graphs.py: import this repository's benchmarks package
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np

from benchmarks.common import Report, cached_json, mean_std, ms, repo_path, run_families, table
from trustlit.data.graphs import (
    GENERATORS,
    PARAMETERS,
    RP_MEAN_DEGREE,
    cached_features,
    feature_function,
    feature_key,
    generated_graphs,
)
from trustlit.graphs.baselines import persistence_image_features, svm_fit_predict, wl_kernel
from trustlit.graphs.classifier import (
    PAPER_GRID,
    expand_grid,
    mlp_fit_predict,
    nested_cross_validation,
    toper_scatter,
)
from trustlit.graphs.filtrations import GraphIndex

FIGURE = "docs/benchmarks/graphs_toper_scatter{suffix}.png"  # a quick run's figure does not replace the full run's
# A 4-point slice of the paper's 144-point grid (appendix A.7, PAPER_GRID): hidden {16, 64} x lr {0.01, 0.001}, L2
# 1e-3, ReLU (no hidden batch norm, no dropout: the model's defaults); what 1 core allows per task.
MLP_GRID = expand_grid(
    {
        "hidden": PAPER_GRID["hidden"][:2],
        "lr": PAPER_GRID["lr"],
        "weight_decay": PAPER_GRID["weight_decay"][:1],
        "activation": PAPER_GRID["activation"][:1],
    }
)
QUICK_GRID = MLP_GRID[:1]
SVM_GRID = [{"C": c} for c in (0.01, 0.1, 1.0, 10.0, 100.0)]
LEADERBOARD = {"er": 89, "rp": 87, "rg": 80, "sbm": 60}
FILTRATIONS, LEVELS = ["degree"], ["sub", "super"]
# Timing repeats per method (median reported); the released package takes seconds per call, one run suffices.
REPEATS = {"toper": 5, "toper_package": 1, "wl": 3, "persistence_images": 5, "reading": 5}
SCALING_NODES = (1000, 10000)
SCALING_METHODS = ("toper", "persistence_images", "toper_package")
METHODS = ("toper", "toper_package", "wl", "persistence_images")
LABELS = {
    "toper": "TopER (ours) + MLP",
    "toper_package": "toper package + MLP",
    "wl": "WL subtree kernel + SVM",
    "persistence_images": "persistence images + SVM",
}


def scale(args: argparse.Namespace) -> dict[str, Any]:
    if args.quick:
        return {"graphs_per_class": 20, "epochs": 100, "grid": QUICK_GRID}
    return {"graphs_per_class": args.graphs_per_class, "epochs": 500, "grid": MLP_GRID}


def run_method(method: str, graphs: list, labels: np.ndarray, args: argparse.Namespace) -> dict[str, Any]:
    """One method's nested cross-validation on one task: both protocols' fold accuracies and feature seconds."""
    size = scale(args)
    if method in ("toper", "toper_package"):
        features = cached_features(graphs, method, FILTRATIONS, LEVELS, None)
        fit_predict = mlp_fit_predict(features, labels, max_epochs=size["epochs"])
        grid = size["grid"]
    elif method == "wl":
        fit_predict, grid = svm_fit_predict(wl_kernel(graphs)[0], labels, kernel="precomputed"), SVM_GRID
    else:
        fit_predict, grid = svm_fit_predict(persistence_image_features(graphs)[0], labels), SVM_GRID
    return nested_cross_validation(labels, fit_predict, grid, outer_folds=10, inner_folds=3, seed=0).summary()


def extractor(method: str) -> Callable[[Sequence], object]:
    """The feature (or kernel) computation of ``method`` on a list of graphs, as the benchmark runs it."""
    if method in ("toper", "toper_package"):
        return lambda graphs: feature_function(method)(graphs, FILTRATIONS, LEVELS)
    return wl_kernel if method == "wl" else persistence_image_features


def seconds_per_graph(method: str, graphs: Sequence) -> float:
    """Median over ``REPEATS[method]`` runs of the wall time of extracting every graph's features, per graph
    (``reading``: of only reading the networkx graphs into arrays, the first step of TopER)."""
    compute = (lambda gs: [GraphIndex.from_graph(G) for G in gs]) if method == "reading" else extractor(method)
    times = []
    for _ in range(REPEATS[method]):
        began = time.perf_counter()
        compute(graphs)
        times.append((time.perf_counter() - began) / len(graphs))
    return statistics.median(times)


def stage_name(tag: str, method: str, graphs: list) -> str:
    """A stage's JSON name; the vector methods' names carry their feature matrix's key, so changed features (the
    dataset-wide thresholds, a new implementation) are recomputed, never read from an older stage."""
    if method in ("toper", "toper_package"):
        return f"{tag}_{method}_{feature_key(graphs, method, FILTRATIONS, LEVELS)[:12]}.json"
    return f"{tag}_{method}.json"


def task_results(task: str, args: argparse.Namespace) -> dict[str, dict[str, Any]]:
    size = scale(args)
    graphs, labels, _ = generated_graphs(task, size["graphs_per_class"], seed=0)
    tag = f"{task}_{size['graphs_per_class']}_{size['epochs']}_{len(size['grid'])}"
    results = {}
    for method in METHODS:
        path = args.workdir / stage_name(tag, method, graphs)
        results[method] = cached_json(path, lambda m=method: run_method(m, graphs, labels, args))
        results[method]["seconds_per_graph"] = seconds_per_graph(method, graphs)
        print(f"{task} {method}: nested {results[method]['nested_mean']:.3f}", flush=True)
    results["toper"]["reading_seconds"] = seconds_per_graph("reading", graphs)
    return results


def percent(values: list[float]) -> str:
    return mean_std([100 * v for v in values])


def method_rows(results: dict[str, dict[str, Any]]) -> list[list[str]]:
    images = results["persistence_images"]["seconds_per_graph"]
    rows = []
    for method in METHODS:
        r = results[method]
        gap = 100 * (r["test_fold_mean"] - r["nested_mean"])
        speed = images / r["seconds_per_graph"]
        rows.append(
            [
                LABELS[method],
                percent(r["nested"]),
                percent(r["test_fold"]),
                f"{gap:+.1f}",
                ms(r["seconds_per_graph"]),
                f"{speed:.1f}x",
            ]
        )
    return rows


HEADER = ["method", "nested acc %", "test-fold acc %", "inflation (points)", "features ms/graph", "PI time / time"]


def scatter(task: str, args: argparse.Namespace) -> str:
    """Pivot vs growth of the degree sublevel filtration, one colour per class; the figure's repository path."""
    graphs, labels, names = generated_graphs(task, scale(args)["graphs_per_class"], seed=0)
    features = cached_features(graphs, "toper", ["degree"], ["sub"], None)
    title = f"TopER vectors of the {task} task"
    figure = FIGURE.format(suffix="_quick" if args.quick else "")
    toper_scatter(features, labels, names, repo_path(figure), label="degree, sublevel", title=title)
    return figure


def verdict(results: dict[str, dict[str, Any]]) -> str:
    toper, wl = results["toper"]["nested_mean"], results["wl"]["nested_mean"]
    seconds, reading = results["toper"]["seconds_per_graph"], results["toper"]["reading_seconds"]
    ratio = results["persistence_images"]["seconds_per_graph"] / seconds
    return (
        f"Targets: TopER within 2 points of WL or better: **{met(near_wl(toper, wl))}** ({100 * (toper - wl):+.1f} "
        "points, nested); "
        f"at least 10x faster than persistence images: **{met(ratio >= 10)}** ({ratio:.1f}x). Of TopER's "
        f"{ms(seconds)} ms per graph, {ms(reading)} ms ({100 * reading / seconds:.0f} %) is reading the networkx "
        "graph into arrays (`GraphIndex.from_graph`; persistence images and WL read it in their own Python loops)."
    )


def timing_note(methods: Sequence[str] = METHODS) -> str:
    runs = ", ".join(f"{LABELS[m].split(' +')[0]} {REPEATS[m]}" for m in methods)
    return f"median over runs on all graphs ({runs}), every method timed in this run, one thread."


def met(condition: bool) -> str:
    return "met" if condition else "missed"


def near_wl(toper: float, wl: float) -> bool:
    """The accuracy target: TopER's nested accuracy within 2 points of the WL kernel's, or above it."""
    return 100 * (toper - wl) >= -2


def above_chance(result: dict[str, Any], classes: int) -> bool:
    """Whether the nested accuracy exceeds chance, 1 / classes, by more than 2 standard errors over the outer folds."""
    folds = result["nested"]
    error = statistics.stdev(folds) / len(folds) ** 0.5
    return statistics.fmean(folds) - 1 / classes > 2 * error


def generators_section(args: argparse.Namespace) -> str:
    size = scale(args)
    results = task_results("generators", args)
    figure = scatter("generators", args)
    return f"""## Random-graph-model task: which generator made the graph

{size["graphs_per_class"]} graphs per generator (Erdős–Rényi, Barabási–Albert, Watts–Strogatz with rewiring 0.1, a
two-block SBM with p_in = 4 p_out, random geometric), n uniform in [30, 80], mean degree uniform in [4, 8] per graph
(`trustlit.data.graphs.generated_graphs("generators")`, seed 0). TopER: degree filtration, sublevel and
superlevel, 4 numbers per graph (`toper_dataset_features`: one threshold set shared by the dataset, as the paper
and the released code); the toper package: the same filtration through `toper.main`. MLP: `TopERClassifier`
(input batch norm, one hidden layer, Adam,
{size["epochs"]} full-batch epochs), grid {size["grid"]}; SVMs: C in {{0.01, 0.1, 1, 10, 100}}. Outer 10 folds,
inner 3 folds. "Inflation": test-fold minus nested accuracy, what selecting on the test fold adds. Feature times:
{timing_note()}

{table(HEADER, method_rows(results), "lrrrrr")}

{verdict(results)}

Figure: `{figure}` (pivot vs growth of the degree sublevel filtration, one colour per generator).
"""


def rp_reading(results: dict[str, dict[str, Any]]) -> str:
    """What the RP numbers say: which methods beat chance, and why degree-based features cannot."""
    classes = len(PARAMETERS["rp"][1])
    toper, wl = results["toper"]["nested_mean"], results["wl"]["nested_mean"]
    above = [LABELS[m] for m in METHODS if above_chance(results[m], classes)]
    accuracies = ", ".join(f"{LABELS[m]} {percent(results[m]['nested'])}" for m in METHODS)
    measured = f"above it by more than 2 standard errors over the 10 outer folds: {', '.join(above) or 'no method'}"
    consequence = (
        "compares methods of which some see a trace of the partition: read the table below."
        if above
        else "compares two chance levels and says nothing; seeing RP needs a feature of the partition (cuts, "
        "spectra, triangle counts), not of degrees."
    )
    return (
        f"Reading of RP: chance is {100 / classes:.0f} % ({classes} classes); nested accuracy {accuracies} %; "
        f"{measured} (a mean below chance is fold noise). The task is built that way: every class has mean degree "
        f"{RP_MEAN_DEGREE:g} and two equal parts, only p_in / p_out differs, so the classes differ in community "
        "structure alone. A node's degree is then a sum of two binomials with the same mean in every class, and the "
        "degree sequence carries almost no trace of the partition; all four methods start from degrees (TopER and "
        "persistence images filter by degree, WL refines degree labels), and no node carries its part, so what the "
        "ratio changes (edges within vs across the parts, hence triangles) reaches them only faintly. "
        f"The WL target on RP ({met(near_wl(toper, wl))} here, {100 * (toper - wl):+.1f} points) {consequence}"
    )


def leaderboard_reading(rows: dict[str, float]) -> str:
    """The public numbers next to ours, with why they are context only."""
    gaps = ", ".join(f"{f.upper()} {rows[f]:.1f} vs {LEADERBOARD[f]} ({rows[f] - LEADERBOARD[f]:+.1f})" for f in rows)
    return (
        f"Reading of the leaderboard column: TopER (nested) vs the public number: {gaps}. These are not comparable: "
        "the suite behind the leaderboard (its graph sizes, parameter values, class counts, graphs per class and "
        "protocol) is unknown to us, and our grids are our own (docs/methods/toper_classifier.md); accuracy on such "
        "tasks depends on how far apart the parameter values lie and on the graph size, which we chose. Our RP "
        f"holds the mean degree fixed by construction, so no degree-based method comes near {LEADERBOARD['rp']} "
        "here; the leaderboard's RP task must be set up differently, in a way we cannot see. The column says where "
        "the public numbers sit, nothing about TopER against them."
    )


def parameters_section(args: argparse.Namespace) -> str:
    rows, blocks, toper_means, readings = [], [], {}, []
    for family in PARAMETERS:
        results = task_results(family, args)
        key, values = PARAMETERS[family]
        nested = {m: percent(results[m]["nested"]) for m in METHODS}
        rows.append([family.upper(), f"{key} in {list(values)}", *nested.values(), str(LEADERBOARD[family])])
        blocks.append(f"### {family.upper()}\n\n{table(HEADER, method_rows(results), 'lrrrrr')}\n\n{verdict(results)}")
        toper_means[family] = 100 * results["toper"]["nested_mean"]
        if family == "rp":
            readings.append(rp_reading(results))
    readings.append(leaderboard_reading(toper_means))
    header = ["family", "classes", *(f"{LABELS[m]} (nested %)" for m in METHODS), "leaderboard"]
    size = scale(args)
    body = "\n\n".join(blocks)
    reading = "\n\n".join(readings)
    return f"""## Parameter classification within one family

{size["graphs_per_class"]} graphs per parameter value, n uniform in [30, 80] (`generated_graphs(family)`, seed 0):
ER edge probability; RP (networkx `random_partition_graph`, two equal parts, mean degree 8) the ratio p_in / p_out;
RG (random geometric) radius; SBM (p_in 0.3, p_out 0.02) the number of blocks. Protocol and models as in the
generator task. The leaderboard column is the public number the issue quotes; we did not find the suite behind it,
so its graphs and classes are not these: it is context, not a like-for-like comparison.

{table(header, rows, "ll" + "r" * (len(METHODS) + 1))}

{reading}

{body}
"""


def scaling_stage(nodes: int, graphs_per_class: int) -> dict[str, Any]:
    """Seconds per graph of each method on ``graphs_per_class`` graphs of every generator at ``nodes`` nodes, all
    timed in one run (the stage is cached as a whole, so the ratios always compare one run)."""
    graphs, _, _ = generated_graphs("generators", graphs_per_class, min_nodes=nodes, max_nodes=nodes, seed=0)
    seconds = {m: seconds_per_graph(m, graphs) for m in (*SCALING_METHODS, "reading")}
    return {"graphs": len(graphs), "mean_edges": float(np.mean([G.number_of_edges() for G in graphs])), **seconds}


def scaling_section(args: argparse.Namespace) -> str:
    per_class = 1 if args.quick else 4
    sizes = (100, 1000) if args.quick else SCALING_NODES
    rows, verdicts = [], []
    for nodes in sizes:
        r = cached_json(args.workdir / f"scaling_{nodes}_{per_class}.json", lambda n=nodes: scaling_stage(n, per_class))
        ratio, package = r["persistence_images"] / r["toper"], r["toper_package"] / r["toper"]
        times = [ms(r[m]) for m in SCALING_METHODS]
        counts = [f"{nodes:,}", str(r["graphs"]), f"{r['mean_edges']:,.0f}"]
        rows.append([*counts, *times, f"{ratio:.1f}x", f"{package:.0f}x"])
        verdicts.append(
            f"{nodes:,} nodes: at least 10x faster than persistence images **{met(ratio >= 10)}** ({ratio:.1f}x); "
            f"reading the graphs into arrays is {100 * r['reading'] / r['toper']:.0f} % of TopER's time."
        )
    header = ["nodes", "graphs", "mean edges", *(f"{LABELS[m].split(' +')[0]} ms/graph" for m in SCALING_METHODS)]
    header += ["PI time / TopER time", "toper package time / TopER time"]
    lines = "\n".join(f"- {v}" for v in verdicts)
    return f"""## Feature-extraction time on larger graphs

{per_class} graphs per generator (the five generators of the random-graph-model task, mean degree uniform in [4, 8])
at each size, {per_class * len(GENERATORS)} graphs in all; degree filtration for all three methods (TopER: sublevel
and superlevel through `toper_dataset_features`; persistence images: H0 and H1 of the degree lower-star filtration,
10 x 10 each; the toper package: `toper.main` on the same filtration). Times: {timing_note(SCALING_METHODS)}

{table(header, rows, "r" * len(header))}

{lines}
"""


SECTIONS = {"generators": generators_section, "parameters": parameters_section, "scaling": scaling_section}
REPORT = Report(
    "Graph classification benchmarks",
    "benchmarks/graphs.py",
    "docs/benchmarks/graphs.md",
    SECTIONS,
    "grakel, gudhi, toper",
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--graphs-per-class", type=int, default=50, help="graphs per class (default 50)")


def main(argv: list[str] | None = None) -> None:
    run_families(
        REPORT,
        [sys.modules[__name__]],
        argv,
        quick="a smoke run: 20 graphs per class, one MLP configuration, 100 epochs",
        workdir=str(repo_path("runs/benchmarks/graphs")),
        threads=1,
    )


if __name__ == "__main__":
    main()
