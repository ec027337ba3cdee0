"""Private distribution estimation from a recipe: the estimators of :mod:`trustlit.privacy.distribution` run by
``trustlit test`` on the samples of a data module.

:class:`PrivateDistributionEstimation` counts the symbols of every test batch (LongTensor [batch] of indices in
[0, d); summed over DDP ranks), then runs each estimator (the private ones at each epsilon) ``draws`` times. For
each fraction f of ``fractions`` the draws estimate from a binomial subsample of the counts, x_i^(f) ~
Binomial(x_i, f) (a Poisson sample of size f n under the Poisson model, a fresh one per draw), so the table and the
PNG show KL(p || q) against the sample size; at f = 1 the draws differ by the estimators' own randomness only
(split and noise). The truth p is the data module's ``probabilities`` (:class:`~trustlit.data.distribution_samples.
DistributionSamples`); a data module without one (a user's own symbols) gets the estimates, not their KL.
Writes the table and the estimates to JSON, a PNG of E KL vs n, and the same to W&B.
Notes: docs/methods/private_good_turing.md
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import torch

from trustlit.analysis import AnalysisModule
from trustlit.figures import log_to_wandb, new_figure, print_table, save_png
from trustlit.hparams import NonNegativeInt, PositiveInt, check_arguments, plain_numbers
from trustlit.privacy.distribution import ESTIMATORS, PRIVATE_ESTIMATORS, check_estimators, kl_divergences

DEFAULT_ESTIMATORS = ["add_constant", "good_turing", "dp_add_constant", "dp_minimax", "dp_good_turing"]


def label(name: str, epsilon: float | None) -> str:
    return name if epsilon is None else f"{name} (eps={epsilon:g})"


def metric_name(name: str, epsilon: float | None) -> str:
    """``kl/<estimator>`` or ``kl/<estimator>/eps=<epsilon>``: E KL at the whole sample, logged as test/<name>."""
    return f"kl/{name}" if epsilon is None else f"kl/{name}/eps={epsilon:g}"


class PrivateDistributionEstimation(AnalysisModule):
    """Estimators of a distribution over d symbols from the counts of the test batches (module docstring).

    Notes: docs/methods/private_good_turing.md

    Args:
        estimators: names from :data:`~trustlit.privacy.distribution.ESTIMATORS`; the private ones run at each
            epsilon.
        epsilons: privacy levels (pure epsilon-DP, one sample replaced).
        draws: runs of each estimator per fraction.
        fractions: sample-size fractions f in (0, 1] (KL vs n); 1 is the whole sample.
        save_estimates: also write the first draw's estimate at f = 1 of every estimator (always, without a truth).
        seed: seeds the subsamples and the estimators.
    """

    def __init__(
        self,
        estimators: list[str] | None = None,
        epsilons: list[float] | None = None,
        draws: PositiveInt = 50,
        fractions: list[float] | None = None,
        save_estimates: bool = False,
        seed: NonNegativeInt = 0,
        results_file: str = "distribution.json",
    ) -> None:
        super().__init__(results_file=results_file)
        check_arguments(PrivateDistributionEstimation.__init__, locals())
        estimators = check_estimators(list(DEFAULT_ESTIMATORS if estimators is None else estimators))
        epsilons = [0.1, 1.0, 10.0] if epsilons is None else [float(e) for e in epsilons]
        fractions = [1.0, 0.1, 0.01] if fractions is None else [float(f) for f in fractions]
        for epsilon in epsilons:
            if not (math.isfinite(epsilon) and epsilon > 0):
                raise ValueError(
                    f"PrivateDistributionEstimation: epsilon={epsilon!r} is invalid, expected a number > 0"
                )
        for fraction in fractions:
            if not 0 < fraction <= 1:
                raise ValueError(f"PrivateDistributionEstimation: fraction={fraction!r} is invalid, expected (0, 1]")
        if not epsilons and any(name in PRIVATE_ESTIMATORS for name in estimators):
            raise ValueError("PrivateDistributionEstimation: epsilons is empty, the private estimators need one")
        self.save_hyperparameters()
        plain_numbers(self.hparams)
        self.hparams.update(estimators=estimators, epsilons=epsilons, fractions=sorted(fractions, reverse=True))
        self.counts: torch.Tensor | None = None

    def symbols(self) -> int:
        datamodule = self.trainer.datamodule
        d = getattr(datamodule, "d", None)
        if d is None:
            raise RuntimeError("PrivateDistributionEstimation needs a data module with the number of symbols `d`")
        return int(d)

    def reset(self) -> None:
        self.counts = torch.zeros(self.symbols(), dtype=torch.long, device=self.device)

    def update(self, batch: Any) -> None:
        symbols = (batch[0] if isinstance(batch, list | tuple) else batch).flatten().long()
        d = self.counts.numel()
        if symbols.numel() and (symbols.min() < 0 or symbols.max() >= d):
            raise ValueError(f"PrivateDistributionEstimation: a batch holds a symbol outside [0, {d}), the data's d")
        self.counts += torch.bincount(symbols, minlength=d)

    def runs(self) -> list[tuple[str, float | None]]:
        """(estimator, epsilon or None) pairs, in the order of the table."""
        hp = self.hparams
        return [
            (name, epsilon)
            for name in hp.estimators
            for epsilon in (hp.epsilons if name in PRIVATE_ESTIMATORS else [None])
        ]

    def compute(self) -> dict[str, Any]:
        counts = self.gather(self.counts[None]).sum(0).cpu().numpy()
        truth = getattr(self.trainer.datamodule, "probabilities", None)
        hp = self.hparams
        rng = np.random.default_rng(hp.seed)
        rows, estimates = [], {}
        for fraction in hp.fractions:
            sample = (
                np.tile(counts, (hp.draws, 1))
                if fraction == 1
                else rng.binomial(counts, fraction, (hp.draws, counts.size))
            )
            for k, (name, epsilon) in enumerate(self.runs()):
                q = ESTIMATORS[name](sample, epsilon, hp.seed + 1000 * k + round(1e6 * fraction))
                if fraction == 1 and (hp.save_estimates or truth is None):
                    estimates[label(name, epsilon)] = q[0].tolist()
                if truth is not None:
                    kl = kl_divergences(truth, q)
                    row = {"estimator": name, "epsilon": epsilon, "fraction": fraction, "n": int(sample.sum(1).mean())}
                    rows.append({**row, "kl_mean": float(kl.mean()), "kl_std": float(kl.std())})
        results: dict[str, Any] = {"d": int(counts.size), "n": int(counts.sum()), "draws": hp.draws, "table": rows}
        results.update({metric_name(r["estimator"], r["epsilon"]): r["kl_mean"] for r in rows if r["fraction"] == 1})
        if estimates:
            results["estimates"] = estimates
        if self.trainer.is_global_zero and rows:
            self.report(rows)
        return results

    def report(self, rows: list[dict[str, Any]]) -> None:
        header = ["estimator", "epsilon", "n", "E KL(p || q)", "std"]
        table = [
            [r["estimator"], "-" if r["epsilon"] is None else r["epsilon"], r["n"], r["kl_mean"], r["kl_std"]]
            for r in rows
        ]
        print_table(f"Distribution estimation in KL ({self.hparams.draws} draws)", header, table)
        figure, axis = new_figure(figsize=(7, 4.5))
        for name, epsilon in self.runs():
            mine = [r for r in rows if r["estimator"] == name and r["epsilon"] == epsilon]
            axis.plot([r["n"] for r in mine], [r["kl_mean"] for r in mine], marker="o", label=label(name, epsilon))
        axis.set(xscale="log", yscale="log", xlabel="n (samples)", ylabel="E KL(p || q)")
        axis.legend(fontsize=7)
        image = save_png(figure, Path(self.trainer.default_root_dir) / Path(self.results_file).with_suffix(".png"))
        log_to_wandb(self.trainer, "distribution", header=header, rows=table, images=[image])
