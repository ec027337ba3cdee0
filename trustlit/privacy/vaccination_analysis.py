"""Private vaccination from a recipe: every strategy of :mod:`trustlit.privacy.vaccination` on one contact network,
run by ``trustlit test``.

For each objective (``max_degree``: reach maximum degree <= D; ``spectral_radius``: reach λ <= ρ) the strategies are
the non-private greedy multi-cover, PrivateMaxDeg / PrivateSpectralRadius with the implicit solution (the target is
always met) and with the explicit AboveThreshold cut (the target up to an additive α), and on request
``private_walks`` (Algorithm 3, the prefix of private hitting walks cut on W_4), at each ε, over seeds. Each
row reports the vaccination budget used (nodes removed), the maximum degree or spectral radius reached, the mean
final SIR outbreak fraction on the vaccinated graph, and the seconds taken (mean and standard deviation over seeds),
with the unvaccinated graph as reference. Results: JSON, a printed table, a PNG (outbreak vs ε) and W&B.

Notes: docs/methods/private_vaccination.md
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

import networkx as nx

from trustlit.analysis import AnalysisModule
from trustlit.data.contact_networks import graph_from_batch
from trustlit.figures import log_to_wandb, new_figure, print_table, save_png
from trustlit.hparams import (
    ClosedUnitInterval,
    NonNegativeFloat,
    NonNegativeInt,
    OpenUnitInterval,
    PositiveFloat,
    PositiveInt,
    check_arguments,
    plain_numbers,
)
from trustlit.privacy.vaccination import (
    greedy_max_degree,
    greedy_spectral_radius,
    max_degree_after,
    private_max_degree,
    private_spectral_radius,
    simulate_sir,
    spectral_radius_after,
)

OBJECTIVES = ("max_degree", "spectral_radius")
STRATEGIES = ("greedy", "private_implicit", "private_explicit")  # the default
ALL_STRATEGIES = (*STRATEGIES, "private_walks")
Objective = Literal["max_degree", "spectral_radius"]
Strategy = Literal["greedy", "private_implicit", "private_explicit", "private_walks"]


@dataclass(frozen=True)
class VaccinationSetting:
    """Targets, privacy and SIR parameters shared by every strategy."""

    degree_target: int = 5
    spectral_target: float = 3.0
    delta: float = 1e-6
    degree_bound: int | None = None
    neighbours: str = "edge"
    threshold_epsilon: float | None = None
    sir_beta: float = 0.1
    sir_gamma: float = 0.2
    sir_seeds: int = 1
    sir_runs: int = 100


def vaccinate(
    G: nx.Graph, objective: str, strategy: str, epsilon: float | None, seed: int, setting: VaccinationSetting
) -> set:
    """The vaccination set of one strategy (``epsilon`` unused by ``greedy``)."""
    if objective == "max_degree":
        if strategy == "greedy":
            return greedy_max_degree(G, setting.degree_target)
        return private_max_degree(
            G,
            setting.degree_target,
            epsilon,
            setting.delta,
            explicit=strategy == "private_explicit",
            seed=seed,
            neighbours=setting.neighbours,
            threshold_epsilon=setting.threshold_epsilon,
        )
    if strategy == "greedy":
        return greedy_spectral_radius(G, setting.spectral_target)
    return private_spectral_radius(
        G,
        setting.spectral_target,
        epsilon,
        setting.delta,
        seed=seed,
        explicit=strategy != "private_implicit",
        degree_bound=setting.degree_bound,
        method="walks" if strategy == "private_walks" else "degree_sums",
    )


def reached(G: nx.Graph, objective: str, removed: set) -> float:
    """Maximum degree or spectral radius of ``G`` once ``removed`` is vaccinated."""
    return float(max_degree_after(G, removed) if objective == "max_degree" else spectral_radius_after(G, removed))


def outbreak(G: nx.Graph, removed: set, setting: VaccinationSetting, seed: int) -> float:
    """The mean final SIR outbreak fraction once ``removed`` is vaccinated (the setting's SIR parameters)."""
    return simulate_sir(
        G, removed, setting.sir_beta, setting.sir_gamma, seeds=setting.sir_seeds, runs=setting.sir_runs, seed=seed
    )


def _mean_std(values: Sequence[float]) -> tuple[float, float]:
    return statistics.fmean(values), statistics.stdev(values) if len(values) > 1 else 0.0


def strategy_row(
    G: nx.Graph,
    objective: str,
    strategy: str,
    epsilon: float | None,
    seeds: Sequence[int],
    setting: VaccinationSetting,
) -> dict[str, Any]:
    """One table row: budget, value reached, outbreak and seconds, mean and std over ``seeds``."""
    budget, value, outbreaks, seconds = [], [], [], []
    for seed in seeds:
        start = time.perf_counter()
        removed = vaccinate(G, objective, strategy, epsilon, seed, setting)
        seconds.append(time.perf_counter() - start)
        budget.append(float(len(removed)))
        value.append(reached(G, objective, removed))
        outbreaks.append(outbreak(G, removed, setting, seed))
    row: dict[str, Any] = {"objective": objective, "strategy": strategy, "epsilon": epsilon, "runs": len(seeds)}
    per_seed = {"budget": budget, "max_reached": value, "outbreak": outbreaks, "seconds": seconds}
    for name, values in per_seed.items():
        row[name], row[f"{name}_std"] = _mean_std(values)
    return {**row, "per_seed": per_seed}


def unvaccinated_row(G: nx.Graph, objective: str, setting: VaccinationSetting) -> dict[str, Any]:
    """The reference row: nothing removed."""
    return {
        "objective": objective,
        "strategy": "none",
        "epsilon": None,
        "runs": 1,
        "budget": 0.0,
        "max_reached": reached(G, objective, set()),
        "outbreak": outbreak(G, set(), setting, seed=0),
    }


def strategy_rows(
    G: nx.Graph,
    objectives: Sequence[str],
    strategies: Sequence[str],
    epsilons: Sequence[float],
    seeds: Sequence[int],
    setting: VaccinationSetting,
) -> list[dict[str, Any]]:
    """The unvaccinated reference and every (objective, strategy, ε) row; greedy once (it is deterministic)."""
    rows = []
    for objective in objectives:
        rows.append(unvaccinated_row(G, objective, setting))
        for strategy in strategies:
            if strategy == "greedy":
                rows.append(strategy_row(G, objective, strategy, None, seeds[:1], setting))
                continue
            if strategy == "private_walks" and objective != "spectral_radius":
                continue  # Algorithm 3 reduces walks, a spectral-radius bound only
            rows.extend(strategy_row(G, objective, strategy, epsilon, seeds, setting) for epsilon in epsilons)
    return rows


class PrivateVaccination(AnalysisModule):
    """Every vaccination strategy on the data module's contact network (module docstring).

    Notes: docs/methods/private_vaccination.md

    Args:
        objectives: ``max_degree`` and/or ``spectral_radius``.
        strategies: ``greedy``, ``private_implicit``, ``private_explicit`` (the default three), ``private_walks``
            (Algorithm 3, private hitting walks; spectral radius only, skipped for the maximum degree).
        epsilons: the edge-level ε of the private strategies; ``delta`` their δ.
        seeds: runs per private (strategy, ε), seeds 0..seeds-1.
        degree_target: D, the maximum degree to reach.
        spectral_target: ρ, the spectral radius to reach.
        degree_bound: the public bound on the maximum degree that PrivateSpectralRadius's privacy assumes
            (None: n - 1).
        neighbours: ``edge`` (edge-level DP) or ``multiset`` (the paper's relaxed experiments: one unit of the
            multi-cover instance; max degree only).
        threshold_epsilon: ε_1 of the explicit max-degree cut (the paper's accounting: total ε + k ε_1); None
            splits ε in half (ours).
        sir_beta, sir_gamma: SIR transmission (per contact per step) and recovery probabilities.
        sir_seeds: initially infected nodes (random, not vaccinated) per SIR run; ``sir_runs`` runs per set.
    """

    def __init__(
        self,
        objectives: list[Objective] | None = None,
        strategies: list[Strategy] | None = None,
        epsilons: list[PositiveFloat] | None = None,
        delta: OpenUnitInterval = 1e-6,
        seeds: PositiveInt = 10,
        degree_target: NonNegativeInt = 5,
        spectral_target: NonNegativeFloat = 3.0,
        degree_bound: PositiveInt | None = None,
        neighbours: Literal["edge", "multiset"] = "edge",
        threshold_epsilon: PositiveFloat | None = None,
        sir_beta: ClosedUnitInterval = 0.1,
        sir_gamma: ClosedUnitInterval = 0.2,
        sir_seeds: PositiveInt = 1,
        sir_runs: PositiveInt = 100,
        results_file: str = "vaccination.json",
    ) -> None:
        super().__init__(results_file=results_file)
        check_arguments(PrivateVaccination.__init__, locals())
        self.objectives = list(OBJECTIVES if objectives is None else objectives)
        self.strategies = list(STRATEGIES if strategies is None else strategies)
        self.epsilons = [float(e) for e in ([0.5, 1.0, 2.0, 4.0, 8.0] if epsilons is None else epsilons)]
        for name, values, valid in (
            ("objectives", self.objectives, OBJECTIVES),
            ("strategies", self.strategies, ALL_STRATEGIES),
        ):
            bad = [v for v in values if v not in valid]
            if bad or not values:
                raise ValueError(
                    f"PrivateVaccination: {name}={values!r} is invalid, expected a non-empty list of {valid}"
                )
        if not self.epsilons or min(self.epsilons) <= 0:
            raise ValueError(f"PrivateVaccination: epsilons={self.epsilons!r} is invalid, expected numbers > 0")
        if sir_gamma == 0:
            raise ValueError("PrivateVaccination: sir_gamma=0 is invalid, expected a recovery probability in (0, 1]")
        self.save_hyperparameters()
        plain_numbers(self.hparams)
        self.setting = VaccinationSetting(
            degree_target=int(degree_target),
            spectral_target=float(spectral_target),
            delta=float(delta),
            degree_bound=None if degree_bound is None else int(degree_bound),
            neighbours=str(neighbours),
            threshold_epsilon=None if threshold_epsilon is None else float(threshold_epsilon),
            sir_beta=float(sir_beta),
            sir_gamma=float(sir_gamma),
            sir_seeds=int(sir_seeds),
            sir_runs=int(sir_runs),
        )
        self.graphs: list[tuple[str, nx.Graph]] = []

    def reset(self) -> None:
        self.graphs = []

    def update(self, batch: dict[str, Any]) -> None:
        self.graphs.append((str(batch.get("name", "graph")), graph_from_batch(batch)))

    def compute(self) -> dict[str, Any]:
        if not self.graphs:
            raise RuntimeError("PrivateVaccination saw no graph: the test dataloader is empty")
        name, G = self.graphs[0]
        seeds = list(range(self.hparams.seeds))
        rows = strategy_rows(G, self.objectives, self.strategies, self.epsilons, seeds, self.setting)
        results: dict[str, Any] = {
            "graph": name,
            "num_nodes": G.number_of_nodes(),
            "num_edges": G.number_of_edges(),
            "setting": asdict(self.setting),
            "rows": rows,
        }
        for row in rows:  # scalars become test/<objective>/<strategy>[/eps_<e>]/<quantity> metrics
            key = f"{row['objective']}/{row['strategy']}" + (f"/eps_{row['epsilon']:g}" if row["epsilon"] else "")
            results[f"{key}/budget"] = row["budget"]
            results[f"{key}/outbreak"] = row["outbreak"]
        if self.trainer.is_global_zero:
            self.report(name, rows)
        return results

    def report(self, name: str, rows: list[dict[str, Any]]) -> None:
        header = ["objective", "strategy", "epsilon", "budget", "reached", "outbreak", "seconds"]
        table = [
            [
                r["objective"],
                r["strategy"],
                "-" if r["epsilon"] is None else r["epsilon"],
                r["budget"],
                r["max_reached"],
                r["outbreak"],
                r.get("seconds", 0.0),
            ]
            for r in rows
        ]
        print_table(f"Vaccination strategies on {name} (means over seeds)", header, table)
        figure, axes = new_figure(ncols=len(self.objectives), figsize=(5 * len(self.objectives), 3.8), squeeze=False)
        for axis, objective in zip(axes[0], self.objectives, strict=True):
            mine = [r for r in rows if r["objective"] == objective]
            for strategy in (s for s in self.strategies if s != "greedy"):
                line = [r for r in mine if r["strategy"] == strategy]
                if line:
                    axis.errorbar(
                        [r["epsilon"] for r in line],
                        [r["outbreak"] for r in line],
                        yerr=[r["outbreak_std"] for r in line],
                        marker="o",
                        capsize=3,
                        label=strategy.replace("_", " "),
                    )
            for r in mine:
                if r["strategy"] in ("greedy", "none"):
                    style = "--" if r["strategy"] == "greedy" else ":"
                    axis.axhline(r["outbreak"], linestyle=style, color="grey", label=r["strategy"])
            axis.set_xscale("log", base=2)
            axis.set_xlabel(f"epsilon ({self.setting.neighbours}-level)")
            axis.set_ylabel("mean final outbreak fraction")
            axis.set_title(f"{name}: {objective.replace('_', ' ')}")
            axis.legend(fontsize=8)
        image = save_png(figure, Path(self.trainer.default_root_dir) / Path(self.results_file).with_suffix(".png"))
        log_to_wandb(self.trainer, "vaccination", header=header, rows=table, images=[image])
