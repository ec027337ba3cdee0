"""Targeted-poisoning section of ``benchmarks/attacks.py`` (``docs/benchmarks/attacks.md``).

- ``poisoning``: Chornomaz et al. (NeurIPS 2025). On a 16-point grid with 25 % label noise (``noisy_blocks``, one
  block of ones for thresholds/intervals, two for unions of 2 intervals), the attacked excess error on the target
  (exact over the 32 targets, mean over seeds) of ERM (exact smallest flip) and of the randomized learner
  (best-response search) against eta on a log grid, d in {1, 2, 4}; the fitted log-log slope (the paper: 1/2 up to
  logs for the randomized learner) and ERM's collapse; then the lower bound's hard distribution (Lemmas 12-14, d
  coins) under its own poisoning scheme, against sqrt(d eta) / 16 (Lemma 13's oblivious bound).

Each (class, learner, eta) row is cached under ``<workdir>/poisoning[_quick]/`` (JSON), so a rerun resumes.
Default scale: n = 400, 4 seeds, 16 J draws (minutes on one core); ``--poisoning-n``, ``--poisoning-seeds`` and
``--poisoning-subsets`` scale it up (the paper's guarantee needs n >= 1 / eta; our grid keeps n eta >= 1.2).
"""

from __future__ import annotations

import argparse
import functools
import statistics
from collections.abc import Callable
from pathlib import Path

import numpy as np

from benchmarks.common import cached_json, table
from trustlit.attacks.poisoning_analysis import excess_row, paper_scale
from trustlit.attacks.targeted_poisoning import (
    ERMLearner,
    FiniteClass,
    RandomizedLearner,
    hard_coin_distribution,
    hard_coin_poisoning,
    loglog_slope,
    population_loss,
)
from trustlit.data.labeled_points import noisy_blocks

CLASSES = {"thresholds": 1, "intervals": 1, "unions2": 2}  # class -> blocks of ones in its distribution


def add_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("poisoning")
    group.add_argument("--poisoning-n", type=int, default=400, help="training sample size")
    group.add_argument("--poisoning-seeds", type=int, default=4, help="samples per (class, learner, eta)")
    group.add_argument("--poisoning-subsets", type=int, default=16, help="J draws averaged by the randomized learner")
    group.add_argument("--poisoning-etas", default="0.003,0.01,0.03,0.1", help="budgets (comma-separated)")


def scale(args: argparse.Namespace) -> dict[str, object]:
    if args.quick:
        return {"n": 120, "seeds": 1, "subsets": 4, "etas": [0.01, 0.1]}
    etas = [float(e) for e in args.poisoning_etas.split(",")]
    return {"n": args.poisoning_n, "seeds": args.poisoning_seeds, "subsets": args.poisoning_subsets, "etas": etas}


def hard_row(d: int, eta: float, n: int, seeds: int, subsets: int) -> dict[str, float]:
    """Excess of ERM and the randomized learner on the hard coins under Lemma 12's scheme (exact in the target)."""
    table_class = FiniteClass(np.array(np.meshgrid(*[[0, 1]] * d)).reshape(d, -1).T)
    excess = {"erm": [], "randomized": []}
    for seed in range(seeds):
        rng = np.random.default_rng(seed)
        distribution = hard_coin_distribution(d, eta, rng)
        sample = distribution.sample(n, rng)
        best = population_loss(table_class, distribution)
        for name, learner in (
            ("erm", ERMLearner(table_class)),
            ("randomized", RandomizedLearner(table_class, eta, subsets)),
        ):
            error = 0.0
            for x in range(d):
                for y, mass in ((1, distribution.p_one[x] / d), (0, (1 - distribution.p_one[x]) / d)):
                    poisoned = hard_coin_poisoning(distribution, sample, x, y, eta, rng).sample
                    p = learner.probability(poisoned, float(x))
                    error += mass * (1 - p if y == 1 else p)
            excess[name].append(error - best)
    return {name: statistics.fmean(values) for name, values in excess.items()}


def poisoning(args: argparse.Namespace) -> str:
    sizes = scale(args)
    n, seeds, subsets, etas = sizes["n"], sizes["seeds"], sizes["subsets"], sizes["etas"]
    root = Path(args.workdir) / ("poisoning_quick" if args.quick else "poisoning")
    rows = []
    for name, blocks in CLASSES.items():
        distribution = noisy_blocks(16, blocks, 0.25)
        for learner in ("erm", "randomized"):
            for eta in etas:
                path = root / f"{name}_{learner}_eta{eta:g}_n{n}_s{seeds}_j{subsets}.json"
                compute = functools.partial(excess_row, distribution, name, learner, eta, n, seeds, subsets)
                rows.append(cached_json(path, compute))
    lines = [
        "## Targeted poisoning: ERM vs the randomized learner (Chornomaz et al., NeurIPS 2025)",
        "",
        "Attacked excess error on the target (mean ± std over seeds; clean excess in brackets) against eta. "
        f"Grid of 16 points, label noise 0.25, n = {n}, {seeds} seeds, {subsets} J draws; ERM: exact smallest flip; "
        "randomized: greedy best-response search over S_2 (a lower bound on an optimal adversary).",
        "",
    ]
    body = []
    for r in rows:
        excess = f"{r['attacked']:.3f} ± {r['attacked_std']:.3f} ({r['clean']:.3f})"
        body.append([r["class"], str(r["d"]), r["learner"], f"{r['eta']:g}", excess, f"{r['paper_scale']:.3f}"])
    lines.append(table(["class", "d", "learner", "eta", "attacked excess (clean)", "sqrt(d eta log(e/(d eta)))"], body))
    slopes = []
    for name in CLASSES:
        cells = [name]
        for learner in ("erm", "randomized"):
            mine = [r for r in rows if r["class"] == name and r["learner"] == learner]
            cells.append(f"{loglog_slope(etas, [r['attacked'] for r in mine]):.2f}")
            cells.append(f"{mine[-1]['attacked']:.3f}")
        slopes.append(cells)
    lines += ["", "Fitted log-log slope of the attacked excess against eta (the paper: 1/2 up to logs for the "
              "randomized learner), and the excess at the largest eta:", ""]  # fmt: skip
    top = f"{etas[-1]:g}"
    lines.append(table(["class", "ERM slope", f"ERM at {top}", "randomized slope", f"randomized at {top}"], slopes))
    hard = []
    for d in (1, 2, 4):
        for eta in etas:
            if d * eta >= 1:
                continue
            path = root / f"hard_d{d}_eta{eta:g}_n{n}_s{seeds}_j{subsets}.json"
            result = cached_json(path, functools.partial(hard_row, d, eta, n, max(seeds, 4), subsets))
            hard.append([str(d), f"{eta:g}", f"{result['erm']:.3f}", f"{result['randomized']:.3f}",
                         f"{(d * eta) ** 0.5 / 16:.3f}", f"{paper_scale(d, eta):.3f}"])  # fmt: skip
    lines += ["", "The lower bound's fixed hard distribution (d coins, biases from Lemma 12's U) under Lemma 12's "
              "poisoning scheme; Lemma 13 guarantees an (oblivious) excess >= sqrt(d eta)/16 for every learner:",
              ""]  # fmt: skip
    lines.append(table(["d", "eta", "ERM excess", "randomized excess", "sqrt(d eta)/16", "sqrt(d eta log)"], hard))
    return "\n".join(lines)


SECTIONS: dict[str, Callable[[argparse.Namespace], str]] = {"poisoning": poisoning}
