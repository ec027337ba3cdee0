"""Section "distribution" of benchmarks/privacy.py: private distribution estimation in KL (private Good-Turing).

    .venv/bin/python -m benchmarks.privacy_distribution [--quick] [--output PATH]
    .venv/bin/python benchmarks/privacy_distribution.py ...    (the same)

Ye, Feldman, Talwar, "Instance-Optimality for Private KL Distribution Estimation" (NeurIPS 2025, arXiv 2505.23620).
E KL(p || q) (mean ± std over fresh Poisson samples x ~ Poi(n p), one per draw) of the estimators of
:mod:`trustlit.privacy.distribution` over n in {1e3, 1e4, 1e5, 1e6}, d in {1e3, 1e4}, epsilon in {0.1, 1, 10} and
non-private, on power laws (beta 1, 1.5, 2), the uniform distribution and two token distributions (TOFU and the
fictitious facts under the SmolLM2 tokenizer, top-d tokens renormalised). Target: DP Good-Turing below both DP
baselines (minimax truncated Laplace, DP add-constant) at every (n, epsilon) on the power laws and token
distributions. Then canary audits (trustlit.audit) of the private estimators and of their noise-off variants.
Finished (distribution, d) grids are cached under ``--distribution-workdir``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

if not __package__:  # run as benchmarks/privacy_distribution.py: import this repository's benchmarks package
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import numpy as np

from benchmarks.common import TOFU, repo_path, table
from trustlit.audit import run_canary_audit
from trustlit.data.distribution_samples import DistributionSamples
from trustlit.paths import atomic_path
from trustlit.privacy.distribution import (
    ESTIMATORS,
    PRIVATE_ESTIMATORS,
    dp_add_constant,
    dp_good_turing,
    dp_minimax,
    kl_divergences,
    poisson_counts,
)

SCRIPT = "benchmarks/privacy_distribution.py"
DEFAULT_WORKDIR = "runs/benchmarks/privacy_distribution"
DISTRIBUTIONS = ("power_law_1", "power_law_1.5", "power_law_2", "uniform", "tofu_tokens", "fictitious_tokens")
TARGETED = ("power_law_1", "power_law_1.5", "power_law_2", "tofu_tokens", "fictitious_tokens")
NON_PRIVATE = ("add_constant", "good_turing")
BASELINES = ("dp_minimax", "dp_add_constant")
EPSILONS = (0.1, 1.0, 10.0)
AUDIT_CLAIMS = (1.0, 4.0)
AUDIT_NEIGHBOURS = (np.array([5, 5, 5, 5]), np.array([4, 6, 5, 5]))  # one sample moved from symbol 0 to 1


def add_distribution_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("distribution")
    group.add_argument("--distribution-draws", type=int, help="fresh samples per cell (default 50, quick 5)")
    group.add_argument("--distribution-audit-runs", type=int, help="audit runs per side (default 2000, quick 200)")
    group.add_argument("--distribution-workdir", default=DEFAULT_WORKDIR, help="cached grids (relative: to the repo)")
    group.add_argument("--distribution-tofu", default=str(TOFU), help="a TOFU directory (full.json)")


def truth(name: str, d: int, tofu: str) -> np.ndarray:
    """The distribution ``name`` (:data:`DISTRIBUTIONS`) over d symbols."""
    if name.startswith("power_law_"):
        return DistributionSamples(source="power_law", d=d, beta=float(name.removeprefix("power_law_"))).distribution()
    source = {"uniform": "uniform", "tofu_tokens": tofu, "fictitious_tokens": "fictitious"}[name]
    return DistributionSamples(source=source, d=d).distribution()


def runs() -> list[tuple[str, float | None]]:
    return [(name, None) for name in NON_PRIVATE] + [(name, e) for name in PRIVATE_ESTIMATORS for e in EPSILONS]


def key(name: str, epsilon: float | None) -> str:
    return name if epsilon is None else f"{name}@{epsilon:g}"


def grid(name: str, d: int, sizes: list[int], draws: int, tofu: str) -> dict[str, Any]:
    """E KL per n and estimator: ``draws`` fresh Poisson samples per n, every estimator on the same samples."""
    p = truth(name, d, tofu)
    cells: dict[str, Any] = {}
    for i, n in enumerate(sizes):
        x = poisson_counts(p, n, draws=draws, seed=1000 * i + 17)
        cells[str(n)] = {
            key(est, eps): kl_divergences(p, ESTIMATORS[est](x, eps, 7 + k)).tolist()
            for k, (est, eps) in enumerate(runs())
        }
    return {"distribution": name, "d": d, "draws": draws, "sizes": sizes, "cells": cells}


def cached_grid(workdir: Path, name: str, d: int, sizes: list[int], draws: int, tofu: str) -> dict[str, Any]:
    path = workdir / f"{name}_d{d}.json"
    if path.is_file():
        cached = json.loads(path.read_text(encoding="utf-8"))
        if cached["sizes"] == sizes and cached["draws"] == draws:
            return cached
    result = grid(name, d, sizes, draws, tofu)
    with atomic_path(path) as temporary:
        temporary.write_text(json.dumps(result), encoding="utf-8")
    return result


def mean_std_kl(values: list[float]) -> str:
    return f"{np.mean(values):.3g} ± {np.std(values, ddof=1):.2g}" if len(values) > 1 else f"{values[0]:.3g}"


def wins(cell: dict[str, list[float]], epsilon: float) -> bool:
    """DP Good-Turing's mean KL below both DP baselines' at ``epsilon``."""
    ours = np.mean(cell[key("dp_good_turing", epsilon)])
    return all(ours < np.mean(cell[key(b, epsilon)]) for b in BASELINES)


def grid_table(result: dict[str, Any]) -> str:
    header = ["n", "ε", "DP Good-Turing", "DP minimax", "DP add-constant", "GT best?"]
    rows = []
    for n in result["sizes"]:
        cell = result["cells"][str(n)]
        for eps in EPSILONS:
            values = [mean_std_kl(cell[key(e, eps)]) for e in ("dp_good_turing", *BASELINES)]
            rows.append([f"{n:.0e}", f"{eps:g}", *values, "yes" if wins(cell, eps) else "**no**"])
        non_private = f"KT {mean_std_kl(cell['add_constant'])}, GT {mean_std_kl(cell['good_turing'])}"
        rows.append([f"{n:.0e}", "∞", non_private, "", "", ""])
    return table(header, rows, "rrrrrl")


def misses(results: list[dict[str, Any]]) -> list[str]:
    found = []
    for result in results:
        if result["distribution"] not in TARGETED:
            continue
        for n in result["sizes"]:
            for eps in EPSILONS:
                if not wins(result["cells"][str(n)], eps):
                    found.append(f"{result['distribution']} d={result['d']} n={n:.0e} ε={eps:g}")
    return found


def audit_score(estimator: Any, claimed: float, noise: bool) -> Any:
    """``train_and_score`` of the canary audit: ``estimator`` on the neighbouring counts (the second with the canary,
    one sample moved), scored by log(q_1 / q_0)."""

    def train_and_score(include: bool, seed: int) -> float:
        q = estimator(AUDIT_NEIGHBOURS[1 if include else 0], claimed, seed=seed, noise=noise)
        return float(np.log(q[1] / q[0]))

    return train_and_score


def audit_verdict(epsilon_lb: float, ceiling: float, claimed: float, noise: bool) -> str:
    if noise:
        return "below the claim" if epsilon_lb <= claimed else "**failed**: above the claim"
    if epsilon_lb > claimed:
        return "above the claim: caught"
    return "not caught: the ceiling is below the claim" if ceiling <= claimed else "**not caught**"


def audit_rows(runs_per_side: int) -> list[list[str]]:
    """Canary audits (95 %, delta = 0) of the private estimators and of their noise-off variants."""
    rows = []
    estimators = {"dp_good_turing": dp_good_turing, "dp_minimax": dp_minimax, "dp_add_constant": dp_add_constant}
    for name, estimator in estimators.items():
        for claimed in AUDIT_CLAIMS:
            for noise in (True, False):
                start = time.perf_counter()
                audit = run_canary_audit(audit_score(estimator, claimed, noise), runs=runs_per_side, delta=0.0)
                rows.append(
                    [
                        name if noise else f"{name}, noise off (broken)",
                        f"{claimed:g}",
                        f"{audit.epsilon_lb:.2f}",
                        f"{audit.ceiling:.2f}",
                        audit_verdict(audit.epsilon_lb, audit.ceiling, claimed, noise),
                        f"{time.perf_counter() - start:.1f}",
                    ]
                )
    return rows


def distribution_section(args: argparse.Namespace) -> str:
    quick = getattr(args, "quick", False)
    draws = args.distribution_draws or (5 if quick else 50)
    audit_runs = args.distribution_audit_runs or (200 if quick else 2000)
    sizes = [1000, 10_000] if quick else [1000, 10_000, 100_000, 1_000_000]
    dims = [1000] if quick else [1000, 10_000]
    workdir = repo_path(args.distribution_workdir)
    results = [
        cached_grid(workdir, name, d, sizes, draws, args.distribution_tofu) for name in DISTRIBUTIONS for d in dims
    ]
    cells = [(r, n, e) for r in results if r["distribution"] in TARGETED for n in r["sizes"] for e in EPSILONS]
    missed = misses(results)
    tables = "\n\n".join(f"#### {r['distribution']}, d = {r['d']}\n\n{grid_table(r)}" for r in results)
    audit = table(
        ["estimator", "claimed ε", "ε_lb (95 %)", "ceiling", "verdict", "seconds"], audit_rows(audit_runs), "lrrrlr"
    )
    verdict = (
        "DP Good-Turing is below both DP baselines in every targeted cell."
        if not missed
        else f"DP Good-Turing is below both DP baselines in {len(cells) - len(missed)} of {len(cells)} targeted cells; "
        f"missed: {'; '.join(missed)}."
    )
    return f"""## Private distribution estimation in KL (private Good-Turing)

Ye, Feldman, Talwar, NeurIPS 2025 (arXiv 2505.23620); estimators of `trustlit.privacy.distribution`, method page
docs/methods/private_good_turing.md. Each cell: E KL(p || q), mean ± std over {draws} fresh Poisson samples
x ~ Poi(n p) (all estimators on the same samples), pure ε-DP with one sample replaced. DP Good-Turing: the paper's
Algorithm 2 with its experiments' α = 0.9 and threshold (2/ε) ln d. Baselines: the truncated Laplace minimax
estimator of its Theorem C.5, q ∝ max(x + Lap(2/ε), max(2/ε, 1)), and DP add-constant q ∝ max(x + Lap(2/ε), 0) + 1/2.
Row ε = ∞: non-private Krichevsky–Trofimov add-1/2 (KT) and the paper's sampling twice, Algorithm 1 (GT). Token
distributions: question + answer of TOFU's full.json (4,000 records) and of the fictitious corpus (128 authors,
1,152 records) under the SmolLM2 tokenizer, the top-d tokens renormalised; TOFU has 8,774 distinct tokens and the
fictitious corpus 381, so at d = 10^4 (TOFU) and d >= 10^3 (fictitious) the last symbols have probability 0.

### Target

DP Good-Turing below both DP baselines at every (n, ε) on the power laws and the token distributions (the uniform
distribution is reported, not targeted). {verdict}

### Privacy audit

Canary audit (`trustlit.audit.run_canary_audit`, {audit_runs} runs per side, half choose the threshold test, half
bound it, Clopper–Pearson at 95 %, δ = 0) on the neighbouring counts (5, 5, 5, 5) and (4, 6, 5, 5) (one sample moved),
score log(q_1 / q_0). The private estimators must stay below their claim; the noise-off variants must exceed it.

{audit}

### Grids

{tables}
"""


def main(argv: list[str] | None = None) -> None:
    """The section alone, into docs/benchmarks/privacy.md: ``benchmarks/privacy.py --sections distribution``."""
    from benchmarks.privacy import main as privacy_main  # privacy.py imports this module: import at call time

    privacy_main(["--sections", "distribution", *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    main()
