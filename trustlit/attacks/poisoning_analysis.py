"""Instance-targeted poisoning from a recipe: ERM against the randomized learner of Chornomaz et al. (NeurIPS 2025)
on one labelled distribution, run by ``trustlit test``.

For each hypothesis class, budget eta and seed, a sample S ~ D^n is drawn; for every target (x, y) the adversary
answers with a poisoned S' (at most floor(eta n) points replaced): the exact smallest flip for ERM
(:func:`~trustlit.attacks.targeted_poisoning.erm_attack`), the best-response search for the randomized learner
(:func:`~trustlit.attacks.targeted_poisoning.randomized_attack`), and optionally the naive learner whose bits (J, r)
the adversary sees (:func:`~trustlit.attacks.targeted_poisoning.naive_public_attack`). Each row reports the clean
and the attacked excess error sum_{x,y} D(x, y) P[A(S')(x) != y] - inf_h L_D(h) (exact in the target, mean and std
over seeds), the paper's scale sqrt(d eta log(e / (d eta))) and the fitted log-log slope of the attacked excess
against eta.
Results: JSON, a printed table, a PNG (attacked excess vs eta) and W&B.

Notes: docs/methods/targeted_poisoning.md
"""

from __future__ import annotations

import math
import statistics
from pathlib import Path
from typing import Any, Literal

import numpy as np

from trustlit.analysis import AnalysisModule
from trustlit.attacks.targeted_poisoning import (
    ERMLearner,
    FiniteDistribution,
    RandomizedLearner,
    check_eta,
    hypothesis_class,
    loglog_slope,
    stratified_bits,
    target_excess,
)
from trustlit.data.labeled_points import distribution_from_batch
from trustlit.figures import log_to_wandb, new_figure, print_table, save_png
from trustlit.hparams import PositiveInt, check_arguments, plain_numbers

Learner = Literal["erm", "randomized", "naive"]
LEARNERS = ("erm", "randomized", "naive")


def paper_scale(d: int, eta: float) -> float:
    """sqrt(d eta log(e / (d eta))), Theorem 4's rate without its constant 36 (1 once d eta >= 1)."""
    return 1.0 if d * eta >= 1 else math.sqrt(d * eta * math.log(math.e / (d * eta)))


def excess_row(
    distribution: FiniteDistribution,
    class_name: str,
    learner_name: str,
    eta: float,
    n: int,
    seeds: int,
    subsets: int,
    bit_pairs: int = 16,
) -> dict[str, Any]:
    """Clean and attacked excess of one (class, learner, eta), mean and std over ``seeds`` samples of size n.
    Learners: ``erm``, ``randomized`` (A_pub) and ``naive`` (A_priv with its bits (J, r) public, ``bit_pairs``
    stratified pairs per target)."""
    hclass = hypothesis_class(class_name)
    learner = ERMLearner(hclass) if learner_name == "erm" else RandomizedLearner(hclass, eta, subsets=subsets)
    clean, attacked = [], []
    for seed in range(seeds):
        sample = distribution.sample(n, np.random.default_rng(seed))
        bits = None
        if learner_name == "naive":
            bits = stratified_bits(len(learner.index_sets(n)), bit_pairs, seed)
        before, after = target_excess(learner, distribution, sample, eta, bits)
        clean.append(before)
        attacked.append(after)
    return {
        "class": class_name,
        "d": hclass.vc_dimension,
        "learner": learner_name,
        "eta": eta,
        "clean": statistics.fmean(clean),
        "attacked": statistics.fmean(attacked),
        "attacked_std": statistics.stdev(attacked) if seeds > 1 else 0.0,
        "paper_scale": paper_scale(hclass.vc_dimension, eta),
        "per_seed": {"clean": clean, "attacked": attacked},
    }


class TargetedPoisoning(AnalysisModule):
    """ERM vs the randomized learner under the targeted adversary on the data module's distribution.

    Notes: docs/methods/targeted_poisoning.md

    Args:
        classes: hypothesis classes: ``thresholds`` (d = 1), ``intervals`` (d = 2), ``unions<k>`` (d = 2k).
        learners: from ``erm``, ``randomized`` (the paper's A_pub) and ``naive`` (A_priv with public bits).
        etas: the poisoning budgets, each in [0, 1).
        sample_size: n, the training sample size.
        seeds: samples per (class, learner, eta).
        subsets: J draws averaged in the randomized learner's p(S, x).
        bit_pairs: public bit pairs (J, r) per target for the naive learner (stratified in r).
    """

    def __init__(
        self,
        classes: list[str] | None = None,
        learners: list[Learner] | None = None,
        etas: list[float] | None = None,
        sample_size: PositiveInt = 400,
        seeds: PositiveInt = 3,
        subsets: PositiveInt = 16,
        bit_pairs: PositiveInt = 16,
        results_file: str = "targeted_poisoning.json",
    ) -> None:
        super().__init__(results_file=results_file)
        check_arguments(TargetedPoisoning.__init__, locals())
        self.classes = list(["thresholds", "intervals", "unions2"] if classes is None else classes)
        self.learners = list(["erm", "randomized"] if learners is None else learners)
        self.etas = [check_eta(e) for e in ([0.003, 0.01, 0.03, 0.1] if etas is None else etas)]
        for name in self.classes:
            hypothesis_class(name)
        bad = [name for name in self.learners if name not in LEARNERS]
        if bad or not self.learners or not self.classes or not self.etas:
            raise ValueError(
                f"TargetedPoisoning: classes={self.classes!r}, learners={self.learners!r}, etas={self.etas!r} are "
                "invalid, expected non-empty lists (learners from erm, randomized, naive)"
            )
        self.save_hyperparameters()
        plain_numbers(self.hparams)
        self.distributions: list[tuple[str, FiniteDistribution]] = []

    def reset(self) -> None:
        self.distributions = []

    def update(self, batch: dict[str, Any]) -> None:
        self.distributions.append((str(batch.get("name", "distribution")), distribution_from_batch(batch)))

    def compute(self) -> dict[str, Any]:
        if not self.distributions:
            raise RuntimeError("TargetedPoisoning saw no distribution: the test dataloader is empty")
        name, distribution = self.distributions[0]
        hp = self.hparams
        rows = [
            excess_row(
                distribution, c, learner, eta, int(hp.sample_size), int(hp.seeds), int(hp.subsets), int(hp.bit_pairs)
            )
            for c in self.classes
            for learner in self.learners
            for eta in self.etas
        ]
        results: dict[str, Any] = {"distribution": name, "sample_size": int(hp.sample_size), "rows": rows}
        for c in self.classes:
            for learner in self.learners:
                mine = [r for r in rows if r["class"] == c and r["learner"] == learner]
                results[f"{c}/{learner}/slope"] = loglog_slope(self.etas, [r["attacked"] for r in mine])
                for r in mine:
                    results[f"{c}/{learner}/eta_{r['eta']:g}/attacked"] = r["attacked"]
        if self.trainer.is_global_zero:
            self.report(name, rows, results)
        return results

    def report(self, name: str, rows: list[dict[str, Any]], results: dict[str, Any]) -> None:
        header = ["class", "d", "learner", "eta", "clean excess", "attacked excess", "sqrt(d eta log)"]
        table = [
            [r["class"], r["d"], r["learner"], r["eta"], r["clean"], r["attacked"], r["paper_scale"]] for r in rows
        ]
        print_table(f"Targeted poisoning on {name} (n = {self.hparams.sample_size}, means over seeds)", header, table)
        figure, axes = new_figure(ncols=len(self.classes), figsize=(4.5 * len(self.classes), 3.6), squeeze=False)
        for axis, c in zip(axes[0], self.classes, strict=True):
            for learner in self.learners:
                mine = [r for r in rows if r["class"] == c and r["learner"] == learner]
                slope = results[f"{c}/{learner}/slope"]
                axis.errorbar(
                    [r["eta"] for r in mine],
                    [r["attacked"] for r in mine],
                    yerr=[r["attacked_std"] for r in mine],
                    marker="o",
                    capsize=3,
                    label=f"{learner} (slope {slope:.2f})",
                )
            axis.plot(self.etas, [r["paper_scale"] for r in rows if r["class"] == c][: len(self.etas)], ":", c="grey")
            axis.set_xscale("log")
            axis.set_yscale("log")
            axis.set_xlabel("eta")
            axis.set_ylabel("attacked excess error")
            axis.set_title(f"{c} (d = {rows[[r['class'] for r in rows].index(c)]['d']})")
            axis.legend(fontsize=8)
        image = save_png(figure, Path(self.trainer.default_root_dir) / Path(self.results_file).with_suffix(".png"))
        log_to_wandb(self.trainer, "targeted_poisoning", header=header, rows=table, images=[image])
