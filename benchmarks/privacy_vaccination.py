"""Private vaccination (Nguyen et al., NeurIPS 2025): the paper's Table-2 quantities on contact networks.

    .venv/bin/python benchmarks/privacy_vaccination.py [--quick] [--output PATH]

:func:`vaccination_section` returns a markdown section (``## Private vaccination``): for each graph (networkx's
karate, Les Misérables, Florentine families, Davis; Barabási–Albert, Chung–Lu and BTER-style graphs with 1,000
nodes; Barabási–Albert and Chung–Lu with 10,000) and each objective (maximum degree <= D, spectral radius <= ρ),
the vaccination budget used and the value reached by the non-private greedy multi-cover and by the private
implicit / explicit solutions at ε ∈ {0.5, 1, 2, 4, 8} (δ = 1e-6), mean ± std over seeds, with the mean final SIR
outbreak and the run time. Targets: D = ⌈0.3 max degree⌉ and ρ = 0.5 λ(G), chosen per graph (a public choice).
PrivateSpectralRadius assumes the graph's maximum degree as its public degree bound (a promise the benchmark takes
from the graph: the paper's own bound could not be read). Every (graph, objective) stage is cached under
``runs/benchmarks/privacy_vaccination/`` so an interrupted run resumes. ``benchmarks/privacy.py`` imports the
section; run alone, this script prints it (and writes ``--output`` if given).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path
from typing import Any

if not __package__:  # run as benchmarks/privacy_vaccination.py: import this repository's benchmarks package
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.common import command_line, mean_std, provenance, repo_path, table, with_provenance
from trustlit.data.contact_networks import contact_network
from trustlit.paths import write_json_atomic
from trustlit.privacy.vaccination import spectral_radius_after
from trustlit.privacy.vaccination_analysis import OBJECTIVES, STRATEGIES, VaccinationSetting, strategy_rows

SCRIPT = "benchmarks/privacy_vaccination.py"
CACHE = Path("runs/benchmarks/privacy_vaccination")
EPSILONS = (0.5, 1.0, 2.0, 4.0, 8.0)
SMALL = ("karate", "les_miserables", "florentine", "davis")
GRAPHS = (
    *((name, 0) for name in SMALL),
    ("barabasi_albert", 1000),
    ("chung_lu", 1000),
    ("bter", 1000),
    ("barabasi_albert", 10000),
    ("chung_lu", 10000),
)


def add_vaccination_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("vaccination")
    group.add_argument("--vaccination-seeds", type=int, default=10, help="seeds per private cell (<= 1,000 nodes)")
    group.add_argument("--vaccination-large-seeds", type=int, default=3, help="seeds per cell on 10,000 nodes")
    group.add_argument("--vaccination-sir-runs", type=int, default=100, help="SIR runs per vaccination set")
    group.add_argument(
        "--vaccination-max-nodes", type=int, default=10000, help="skip the graphs with more nodes (1000: no 10k)"
    )


def graph_label(name: str, nodes: int) -> str:
    return f"{name}_{nodes}" if nodes else name


def setting_for(G: Any, quick: bool, sir_runs: int) -> VaccinationSetting:
    degree = max((d for _, d in G.degree), default=0)
    return VaccinationSetting(
        degree_target=max(1, math.ceil(0.3 * degree)),
        spectral_target=round(0.5 * spectral_radius_after(G, []), 3),
        delta=1e-6,
        degree_bound=max(degree, 1),
        sir_beta=0.1 if G.number_of_nodes() < 1000 else 0.05,
        sir_gamma=0.2,
        sir_seeds=1 if G.number_of_nodes() < 1000 else 5,
        sir_runs=10 if quick else sir_runs,
    )


def stage(name: str, nodes: int, objective: str, args: argparse.Namespace) -> dict[str, Any]:
    """One (graph, objective): every strategy's rows, from the cache when this configuration already ran."""
    quick = bool(getattr(args, "quick", False))
    G = contact_network(name, nodes=nodes or 1000, seed=0)
    seeds = args.vaccination_large_seeds if G.number_of_nodes() >= 10000 else args.vaccination_seeds
    seeds = 2 if quick else seeds
    setting = setting_for(G, quick, args.vaccination_sir_runs)
    key = {"graph": graph_label(name, nodes), "objective": objective, "seeds": seeds, "setting": vars(setting)}
    path = repo_path(CACHE) / f"{graph_label(name, nodes)}_{objective}{'_quick' if quick else ''}.json"
    if path.is_file():
        cached = json.loads(path.read_text(encoding="utf-8"))
        if cached["key"] == key:
            return cached
    began = time.perf_counter()
    rows = strategy_rows(G, [objective], STRATEGIES, EPSILONS, list(range(seeds)), setting)
    result = {
        "key": key,
        "nodes": G.number_of_nodes(),
        "edges": G.number_of_edges(),
        "rows": rows,
        "seconds": time.perf_counter() - began,
    }
    write_json_atomic(path, result)
    print(f"vaccination: {key['graph']} {objective} in {result['seconds']:.0f} s", flush=True)
    return result


def cell(row: dict[str, Any], digits: int = 1) -> str:
    """``budget / reached / outbreak %`` of one row (means ± std over seeds)."""
    per = row.get("per_seed")
    if per is None:
        return f"{row['budget']:.0f} / {row['max_reached']:.{digits}f} / {100 * row['outbreak']:.1f} %"
    outbreak = [100 * v for v in per["outbreak"]]
    return f"{mean_std(per['budget'], 1)} / {mean_std(per['max_reached'], digits)} / {mean_std(outbreak, 1)} %"


def objective_table(stages: list[dict[str, Any]], objective: str) -> str:
    digits = 1 if objective == "max_degree" else 2
    header = ["graph (n, target)", "strategy", *(f"ε = {e:g}" for e in EPSILONS)]
    rows = []
    for result in stages:
        key = result["key"]
        target = key["setting"]["degree_target" if objective == "max_degree" else "spectral_target"]
        label = f"{key['graph']} ({result['nodes']}, {target:g})"
        by = {(r["strategy"], r["epsilon"]): r for r in result["rows"]}
        none, greedy = by[("none", None)], by[("greedy", None)]
        rows.append([label, "none / greedy", f"{cell(none, digits)} ; greedy {cell(greedy, digits)}", *[""] * 4])
        for strategy in ("private_implicit", "private_explicit"):
            rows.append(["", strategy.replace("private_", ""), *(cell(by[(strategy, e)], digits) for e in EPSILONS)])
    return table(header, rows)


def timing_table(stages: list[dict[str, Any]]) -> str:
    header = ["graph", "objective", "greedy s", "implicit s (ε = 1)", "explicit s (ε = 1)", "stage s"]
    rows = []
    for result in stages:
        if result["nodes"] < 10000:
            continue
        by = {(r["strategy"], r["epsilon"]): r for r in result["rows"]}
        rows.append(
            [
                result["key"]["graph"],
                result["key"]["objective"],
                f"{by[('greedy', None)]['seconds']:.2f}",
                mean_std(by[("private_implicit", 1.0)]["per_seed"]["seconds"], 2),
                mean_std(by[("private_explicit", 1.0)]["per_seed"]["seconds"], 2),
                f"{result['seconds']:.0f}",
            ]
        )
    return table(header, rows, "llrrrr")


def vaccination_section(args: argparse.Namespace) -> str:
    graphs = [(name, nodes) for name, nodes in GRAPHS if nodes <= args.vaccination_max_nodes]
    stages = {o: [stage(name, nodes, o, args) for name, nodes in graphs] for o in OBJECTIVES}
    timing = (
        timing_table(stages["max_degree"] + stages["spectral_radius"])
        if args.vaccination_max_nodes >= 10000
        else "Not run in this report (`--vaccination-max-nodes` below 10,000)."
    )
    return f"""## Private vaccination

Nguyen, Srinivasan, Valieva, Vullikanti, Wu (NeurIPS 2025, arXiv 2506.00745): vaccinate (remove) nodes so that the
maximum degree drops to D or the spectral radius to ρ, under edge-level (ε, δ = 1e-6)-DP
(`trustlit.privacy.vaccination`, method page `docs/methods/private_vaccination.md`). Each cell: **vaccines used /
value reached / mean final SIR outbreak** (mean ± std over {args.vaccination_seeds} seeds on graphs up to 1,000
nodes, {args.vaccination_large_seeds} on 10,000; SIR β = 0.1 per contact per step with 1 seed infection below 1,000
nodes, β = 0.05 with 5 above, γ = 0.2, {args.vaccination_sir_runs} runs per set). Targets per graph:
D = ⌈0.3 max degree⌉, ρ = 0.5 λ(G). `implicit` always meets the target; `explicit` releases a prefix of the private
permutation cut by AboveThreshold (half of ε), so it meets the target only up to its additive α. The spectral
variant's privacy assumes the graph's maximum degree as its public degree bound Δ̄ and runs each step at
ε / (12 Δ̄ - 6), which leaves it close to a uniformly random order on every graph here.

### Maximum degree (Table 2: budget and max degree reached)

{objective_table(stages["max_degree"], "max_degree")}

### Spectral radius (budget and λ reached)

{objective_table(stages["spectral_radius"], "spectral_radius")}

### Run time on the 10,000-node graphs (one CPU core, seconds per vaccination set; SIR excluded)

{timing}
"""


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a fast smoke run (2 seeds, 10 SIR runs)")
    parser.add_argument("--output", default=None, help="also write the section to this markdown file")
    add_vaccination_arguments(parser)
    args = parser.parse_args(argv)
    load = os.getloadavg()[0]
    text = with_provenance(vaccination_section(args), provenance(command_line(SCRIPT, argv), args.quick, load))
    print(text)
    if args.output:
        output = repo_path(args.output)
        output.parent.mkdir(parents=True, exist_ok=True)
        output.write_text(text, encoding="utf-8")


if __name__ == "__main__":
    main()
