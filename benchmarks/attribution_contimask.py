"""Contimask sections of ``benchmarks/attribution.py`` (``docs/benchmarks/attribution.md``).

- ``contimask-synthetic``: Contimask's rare-feature task (:mod:`trustlit.data.timeseries`: 100 grid times x 50
  channels, 5 salient channels on t in (0.25, 0.75), every cell observed with probability ``--contimask-observe``)
  in both variants: label-carrying values (``rare_feature``), explained on the released white box
  f(x) = sum of x^2 over the salient window (``RareFeatureOracle(mode="value")``), and informative missingness
  (``rare_feature_missingness``), explained on the released white box that counts the observed salient cells
  (``mode="count"``: only deleting observations changes it). As released, each instance has its own white box
  and its own mask. AUP, AUR and AUPRC of the per-observation saliency against the truth (mean over instances)
  for Contimask with blur, fade (Adam) and deletion (PGPE), the Dynamask mask on a 100-bin grid (blur), Integrated
  Gradients and occlusion (deleting one observation at a time); random scores as the floor.
- ``contimask-pbcseq``: the Mayo PBC lab series (``survival::pbcseq``, 7 labs at irregular visits, death as label)
  explained on an :class:`~trustlit.irregular_classifiers.ObservationTransformer` trained here on the training
  split (cached): ERASER comprehensiveness and sufficiency (DeYoung et al. 2020, bins 1/5/10/20/50 % of the
  observations, deleted = never made) of every method on test patients, and the deletion curve at 10..50 %.

Each explained instance is cached per method under ``<workdir>/contimask[_quick]/`` (JSON), so a rerun resumes.
Budgets: reduced from the released ones so that a run takes about a quarter of an hour on a 2-core CPU (Adam 2000
steps instead of 16000; PGPE 300 generations of 50 solutions with 4 deletion draws instead of 2000 x 100 x 10;
6 instances instead of 10; 6 pbcseq patients, deletion taking ~50 s each with the transformer): the
``--contimask-*`` flags restore them (hours on a CPU). ``--quick`` cuts them to a smoke run. The cache is keyed by
the budget.
"""

from __future__ import annotations

import argparse
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from benchmarks.common import bare_trainer, cached_json, table

METHODS = ("contimask-blur", "contimask-fade", "contimask-deletion", "dynamask-grid", "integrated-gradients",
           "occlusion", "random")  # fmt: skip
SOURCES = {"rare_feature": "value", "rare_feature_missingness": "count"}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("contimask")
    group.add_argument("--contimask-instances", type=int, default=6, help="synthetic instances (released 10)")
    group.add_argument("--contimask-observe", type=float, default=0.2, help="synthetic cell observation probability")
    group.add_argument("--contimask-gap", type=float, default=0.1, help="missingness variant: salient p +- gap")
    group.add_argument("--contimask-steps", type=int, default=2000, help="Adam steps (released 16000)")
    group.add_argument("--contimask-generations", type=int, default=300, help="PGPE generations (released 2000)")
    group.add_argument("--contimask-popsize", type=int, default=50, help="PGPE population (released 100)")
    group.add_argument("--contimask-samples", type=int, default=4, help="deletion draws per evaluation (released 10)")
    group.add_argument("--contimask-dynamask-epochs", type=int, default=500, help="Dynamask epochs (released 500)")
    group.add_argument("--contimask-patients", type=int, default=6, help="pbcseq test patients explained")
    group.add_argument("--contimask-epochs", type=int, default=30, help="pbcseq black-box training epochs")


def budget(args: argparse.Namespace) -> dict[str, int]:
    if args.quick:
        return {"instances": 2, "steps": 150, "generations": 20, "popsize": 10, "samples": 2, "dynamask_epochs": 60,
                "patients": 4, "epochs": 3}  # fmt: skip
    names = ("instances", "steps", "generations", "popsize", "samples", "dynamask_epochs", "patients", "epochs")
    return {name: getattr(args, f"contimask_{name}") for name in names}


def explain(
    method: str, black_box: torch.nn.Module, batch: dict, sizes: dict[str, int], channels: int, output: str
) -> tuple[torch.Tensor, float]:
    """The saliency [B, L] of ``method`` and its wall time in seconds."""
    from trustlit.attribution.contimask import Contimask
    from trustlit.attribution.saliency import dynamask_grid, integrated_gradients, occlusion

    start = time.perf_counter()
    if method.startswith("contimask-"):
        module = Contimask(black_box, perturbation=method.removeprefix("contimask-"), n_channels=channels,
                           steps=sizes["steps"], generations=sizes["generations"], popsize=sizes["popsize"],
                           samples=sizes["samples"], output=output, plot_instances=0)  # fmt: skip
        logits, _, _ = module.fit_masks(batch)
        saliency = torch.sigmoid(logits)  # deletion: ranked by its logits (the released mask is 1[l > 0.5])
    elif method == "dynamask-grid":
        saliency = dynamask_grid(black_box, batch, n_bins=100, n_channels=channels, n_epochs=sizes["dynamask_epochs"],
                                 keep_ratio=0.05, output=output)  # fmt: skip
    elif method == "integrated-gradients":
        saliency = integrated_gradients(black_box, batch, output=output)
    elif method == "occlusion":
        saliency = occlusion(black_box, batch, output=output)
    else:
        generator = torch.Generator().manual_seed(int(batch["index"][0]))
        saliency = torch.rand(batch["values"].shape, generator=generator) * batch["observed"]
    return saliency.detach(), time.perf_counter() - start


def root(args: argparse.Namespace) -> Path:
    """The cache of one budget: runs at other budgets never mix."""
    sizes = budget(args)
    tag = "adam{steps}-pgpe{generations}x{popsize}x{samples}-dynamask{dynamask_epochs}".format(**sizes)
    return Path(args.workdir) / ("contimask_quick" if args.quick else "contimask") / tag


# --- synthetic -----------------------------------------------------------------------------------------------------


def synthetic_instance(source: str, method: str, sample: Any, index: int, sizes: dict[str, int]) -> dict:
    from trustlit.attribution.saliency import aup, auprc, aur
    from trustlit.data.timeseries import collate_observations
    from trustlit.irregular_classifiers import RareFeatureOracle

    truth = sample.saliency
    salient = sorted(set(sample.channels[truth].tolist())) or [0]
    oracle = RareFeatureOracle(salient_channels=salient, mode=SOURCES[source]).eval()
    batch = collate_observations([sample], [index])
    saliency, seconds = explain(method, oracle, batch, sizes, channels=50, output="logits")
    scores = saliency[0][batch["observed"][0]]
    metrics = {"aup": aup(scores, truth), "aur": aur(scores, truth), "auprc": auprc(scores, truth)}
    return metrics | {"seconds": seconds, "observations": len(truth), "salient": int(truth.sum())}


def synthetic_row(args: argparse.Namespace, source: str, method: str, samples: list, sizes: dict[str, int]) -> list:
    """One table row: a method's mean +- sd AUP, AUR, AUPRC and seconds over the instances (each cached)."""
    runs = []
    for i, sample in enumerate(samples):
        path = root(args) / "synthetic" / source / method / f"{i}.json"
        runs.append(cached_json(path, lambda: synthetic_instance(source, method, sample, i, sizes)))  # noqa: B023 (called now)
    metrics = [mean_sd([run[key] for run in runs]) for key in ("aup", "aur", "auprc")]
    return [method, *metrics, f"{np.mean([run['seconds'] for run in runs]):.1f}"]


def contimask_synthetic(args: argparse.Namespace) -> str:
    from trustlit.data.timeseries import rare_feature_missingness_observations, rare_feature_observations

    logging.getLogger("evotorch").setLevel(logging.WARNING)  # two INFO lines per PGPE phase otherwise
    sizes = budget(args)
    blocks = []
    for source, mode in SOURCES.items():
        count, observe = 4 * sizes["instances"], args.contimask_observe
        if source == "rare_feature":
            drawn = rare_feature_observations(count, observe_prob=observe, seed=1)
        else:
            drawn = rare_feature_missingness_observations(
                count, observe_prob=observe, missingness_gap=args.contimask_gap, seed=1
            )
        samples = [sample for sample in drawn if sample.saliency.any()][: sizes["instances"]]
        rows = [synthetic_row(args, source, method, samples, sizes) for method in METHODS]
        observations = np.mean([len(sample.times) for sample in samples])
        header = ["method", "AUP", "AUR", "AUPRC", "s / instance"]
        blocks.append(
            f"### {source} (white box: {mode})\n\n{len(samples)} instances, {observations:.0f} observations each on "
            f"average.\n\n{table(header, rows)}\n"
        )
    return f"""## Contimask on the rare-feature task

Data: Contimask's rare-feature task (100 grid times x 50 channels, 5 salient channels on t in (0.25, 0.75)), every
cell observed with probability {args.contimask_observe} (irregular, channel-wise; in the missingness variant the
salient cells with {args.contimask_observe} +- {args.contimask_gap} by label). Black boxes: the released white
boxes, one per instance (the sum of x^2 over the salient cells; the count of observed salient cells for the
informative-missingness variant). Budgets: Adam {sizes["steps"]} steps (blur, fade); PGPE {sizes["generations"]}
generations of {sizes["popsize"]} with {sizes["samples"]} deletion draws; Dynamask {sizes["dynamask_epochs"]}
epochs on 100 bins (keep ratio 0.05); IG 50 steps (baseline 0). Released Contimask budgets: 16000 Adam steps,
2000 PGPE generations of 100 with 10 draws. The deletion masks are ranked by their logits (the released fitted
mask is 1[l > 0.5]). Mean +- sd over instances; random scores are the floor.

{chr(10).join(blocks)}
"""


def mean_sd(values: list[float]) -> str:
    return f"{np.mean(values):.3f} +- {np.std(values):.3f}"


# --- pbcseq --------------------------------------------------------------------------------------------------------


def pbcseq_black_box(args: argparse.Namespace, sizes: dict[str, int]) -> tuple[Any, Any, float]:
    """The ObservationTransformer of recipes/attribution/transformer_pbcseq.yaml trained on the training split
    (state cached), the data module and the test AUROC."""
    from trustlit.data.timeseries import IrregularTimeSeriesDataModule
    from trustlit.irregular_classifiers import ObservationTransformer

    torch.manual_seed(0)
    data = IrregularTimeSeriesDataModule(source="pbcseq", batch_size=32, seed=0)
    data.setup("fit")
    model = ObservationTransformer(num_channels=7, d_model=32, num_heads=4, num_layers=2, dim_feedforward=64)
    path = Path(args.workdir) / "contimask" / f"pbcseq_transformer_{sizes['epochs']}epochs.pt"
    if path.exists():
        model.load_state_dict(torch.load(path, weights_only=True))
    else:
        bare_trainer(max_epochs=sizes["epochs"]).fit(model, datamodule=data)
        path.parent.mkdir(parents=True, exist_ok=True)
        torch.save(model.state_dict(), path)
    model.eval()
    auroc = bare_trainer().test(model, datamodule=data, verbose=False)[0]["test/auroc"]
    return model, data, float(auroc)


def pbcseq_method(method: str, model: Any, batch: dict, sizes: dict[str, int]) -> dict:
    from trustlit.attribution.saliency import ERASER_BINS, eraser_scores, removal_curves

    saliency, seconds = explain(method, model, batch, sizes, channels=7, output="logits")
    noise = 1e-6 * torch.rand(saliency.shape, generator=torch.Generator().manual_seed(1))  # ties broken at random
    curves = removal_curves(model, batch, saliency + noise, ERASER_BINS)
    deletion = removal_curves(model, batch, saliency + noise, (0.1, 0.2, 0.3, 0.4, 0.5))["deletion"]
    return eraser_scores(curves) | {"seconds": seconds, "deletion": deletion.mean(0).tolist(),
                                    "full": float(curves["full"].mean())}  # fmt: skip


def contimask_pbcseq(args: argparse.Namespace) -> str:
    from trustlit.data.timeseries import collate_observations

    logging.getLogger("evotorch").setLevel(logging.WARNING)
    sizes = budget(args)
    model, data, auroc = pbcseq_black_box(args, sizes)
    test = data.splits["test"]
    patients = [test[i][0] for i in range(min(sizes["patients"], len(test)))]
    batch = collate_observations(patients, list(range(len(patients))))
    rows, full = [], float("nan")
    for method in METHODS:
        result = cached_json(
            root(args) / f"pbcseq_{sizes['epochs']}epochs_{len(patients)}patients" / f"{method}.json",
            lambda m=method: pbcseq_method(m, model, batch, sizes),
        )
        rows.append([method, f"{result['comprehensiveness']:.3f}", f"{result['sufficiency']:.3f}",
                     " / ".join(f"{p:.3f}" for p in result["deletion"]), f"{result['seconds']:.1f}"])  # fmt: skip
        full = result["full"]
    observations = float(batch["observed"].sum(-1).float().mean())
    header = ["method", "comprehensiveness (higher better)", "sufficiency (lower better)",
              "p(class) after deleting 10/20/30/40/50 %", "s total"]  # fmt: skip
    return f"""## Contimask on pbcseq: deletion and insertion

Black box: an ObservationTransformer (d_model 32, 2 layers, 4 heads) trained {sizes["epochs"]} epochs on the pbcseq
training split (test AUROC {auroc:.3f}). Explained: the first {len(patients)} test patients ({observations:.0f}
observations each on average). The curves measure the probability of the class the model predicts (mean p(x) =
{full:.3f}); the masks, IG and occlusion explain that class's logit. Comprehensiveness = mean over the ERASER bins
(1, 5, 10, 20, 50 % of the observations) of p(x) - p(x without the top observations); sufficiency = mean of p(x) -
p(top observations only); deleted observations are never made (observed=False). Budgets as in the synthetic
section; a single run of each method (seed 0) on these patients.

{table(header, rows)}
"""


SECTIONS: dict[str, Callable[[argparse.Namespace], str]] = {
    "contimask-synthetic": contimask_synthetic,
    "contimask-pbcseq": contimask_pbcseq,
}
