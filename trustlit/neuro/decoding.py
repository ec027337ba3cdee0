"""Brain decoding through a semantic bottleneck from a recipe: both decoders on one data module, run by
``trustlit test``.

:class:`SemanticBottleneckDecoding` fits, on the training stimuli of a
:class:`~trustlit.data.fmri.FMRIDecodingDataModule`, the
:class:`~trustlit.neuro.semantic_bottleneck.SemanticBottleneckDecoder` (voxels -> concepts -> embedding) and the
direct ridge (voxels -> embedding, BrainDiffuser's linear stage), and reports on the held-out stimuli:

- ``bottleneck/cosine``, ``direct/cosine``: mean cosine similarity of decoded and true embeddings, and
  ``cosine_drop_percent`` = 100 (direct - bottleneck) / direct (the paper: at most about 4 % on CLIP);
- ``bottleneck/two_way``, ``direct/two_way``: 2-way identification accuracy (Pearson, as BrainDiffuser);
- ``concepts_to_embedding/cosine``: B applied to the true concepts (the paper's "Int to CLIP" upper bound);
- ``concept_accuracy``: predicted yes/no answers (scores >= 0.5) that match the annotations;
- with the simulator's regions: ``region_auc`` per concept and its mean (how well |A_k| ranks the voxels of the
  concept's region first);
- the chosen alphas; a PNG of the weight maps (one concept per region, a slice through each region's centre).

Results: JSON, a printed table, the PNG and W&B.

Notes: docs/methods/semantic_bottleneck.md
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import numpy as np

from trustlit.analysis import AnalysisModule
from trustlit.data.fmri import DecodingData, data_from_batch
from trustlit.figures import log_to_wandb, new_figure, print_table, save_png
from trustlit.hparams import PositiveFloat, PositiveInt, check_arguments, plain_numbers
from trustlit.neuro.ridge import Selection
from trustlit.neuro.semantic_bottleneck import (
    CONCEPT_ALPHAS,
    EMBEDDING_ALPHAS,
    DirectRidgeDecoder,
    SemanticBottleneckDecoder,
    cosine_similarity,
    region_recovery_auc,
    two_way_identification,
)


def decode(
    data: DecodingData,
    bottleneck: SemanticBottleneckDecoder,
    direct: DirectRidgeDecoder,
    similarity: Literal["pearson", "cosine"] = "pearson",
) -> dict[str, Any]:
    """Fit both decoders on ``data``'s training stimuli and score them on its test stimuli (module docstring)."""
    train, test = ~data.test, data.test
    if train.sum() < 2 or test.sum() < 2:
        raise ValueError(
            f"decoding needs >= 2 train and >= 2 test stimuli, got {int(train.sum())} and {int(test.sum())}"
        )
    bottleneck.fit(data.voxels[train], data.concepts[train], data.embeddings[train])
    direct.fit(data.voxels[train], data.concepts[train], data.embeddings[train])
    truth = data.embeddings[test]
    predicted = {
        "bottleneck": bottleneck.predict(data.voxels[test]),
        "direct": direct.predict(data.voxels[test]),
        "concepts_to_embedding": bottleneck.embed_concepts(data.concepts[test]),
    }
    results: dict[str, Any] = {"train_stimuli": int(train.sum()), "test_stimuli": int(test.sum())}
    for name, h in predicted.items():
        results[f"{name}/cosine"] = float(cosine_similarity(h, truth).mean())
        results[f"{name}/two_way"] = two_way_identification(h, truth, similarity)
    results["cosine_drop_percent"] = 100 * (1 - results["bottleneck/cosine"] / results["direct/cosine"])
    answers = bottleneck.predict_concepts(data.voxels[test]) >= 0.5
    results["concept_accuracy"] = float((answers == (data.concepts[test] == 1)).mean())
    results["alphas"] = {"bottleneck": bottleneck.chosen_alphas, "direct": direct.chosen_alphas}
    if len(data.region_masks):
        aucs = region_recovery_auc(bottleneck.weight_maps, data.region_masks, data.concept_regions)
        results["region_auc"] = dict(zip(data.concept_names, aucs.tolist(), strict=True))
        results["region_auc_mean"] = float(np.nanmean(aucs))
    return results


def shown_concepts(data: DecodingData) -> list[int]:
    """One concept per region (the first of each), else the first four."""
    if not len(data.region_masks):
        return list(range(min(4, len(data.concept_names))))
    firsts = [np.flatnonzero(data.concept_regions == r) for r in range(len(data.region_names))]
    return [int(f[0]) for f in firsts if len(f)]


def weight_map_figure(data: DecodingData, weight_maps: np.ndarray, path: Path, title: str = "") -> Path:
    """A PNG of |A_k| for :func:`shown_concepts`: the axial slice through the centre of the concept's region (or the
    grid's middle slice), the region outlined."""
    concepts = shown_concepts(data)
    figure, axes = new_figure(ncols=len(concepts), figsize=(3.2 * len(concepts), 3.4), squeeze=False)
    for axis, k in zip(axes[0], concepts, strict=True):
        volume = np.zeros(int(np.prod(data.grid)))
        volume[data.voxel_index] = np.abs(weight_maps[k])
        volume = volume.reshape(data.grid)
        region = int(data.concept_regions[k])
        z = data.grid[2] // 2
        if region >= 0:
            inside = np.zeros(int(np.prod(data.grid)), dtype=bool)
            inside[data.voxel_index] = data.region_masks[region]
            inside = inside.reshape(data.grid)
            z = int(np.argmax(inside.sum(axis=(0, 1))))
            axis.contour(inside[:, :, z].T, levels=[0.5], colors="white", linewidths=1)
        axis.imshow(volume[:, :, z].T, origin="lower", cmap="magma")
        label = data.concept_names[k] + (f"\n({data.region_names[region]} region)" if region >= 0 else "")
        axis.set_title(label, fontsize=8)
        axis.set_xticks([])
        axis.set_yticks([])
    if title:
        figure.suptitle(title, fontsize=9)
    return save_png(figure, path)


class SemanticBottleneckDecoding(AnalysisModule):
    """Bottleneck vs direct decoding on the data module's stimuli (module docstring).

    Notes: docs/methods/semantic_bottleneck.md

    Args:
        alphas: the grid of ridge A and of the direct ridge (default 1e-6..1e6, 13 values, the paper's).
        embedding_alphas: the grid of ridge B (default 1e-3..1e4, the paper's).
        cv: folds of the cross-validation that chooses the alphas (the paper: 5).
        selection: ``kfold_per_target`` (default, the paper's himalaya: one alpha per target by ``cv``-fold CV),
            ``loo_per_target`` (scikit-learn's leave-one-out, per target) or ``kfold_shared`` (one alpha).
        binarize: threshold A's scores before B (ours; the paper feeds the continuous scores).
        rescale_direct: BrainDiffuser's test-time rescaling of the direct decoder's predictions (off by default).
        similarity: of the 2-way identification, ``pearson`` (BrainDiffuser) or ``cosine``.
    """

    def __init__(
        self,
        alphas: list[PositiveFloat] | None = None,
        embedding_alphas: list[PositiveFloat] | None = None,
        cv: PositiveInt = 5,
        selection: Selection = "kfold_per_target",
        binarize: bool = False,
        rescale_direct: bool = False,
        similarity: Literal["pearson", "cosine"] = "pearson",
        results_file: str = "decoding.json",
    ) -> None:
        super().__init__(results_file=results_file)
        check_arguments(SemanticBottleneckDecoding.__init__, locals())
        if similarity not in ("pearson", "cosine"):
            raise ValueError(f"similarity={similarity!r} is invalid, expected 'pearson' or 'cosine'")
        self.save_hyperparameters()
        plain_numbers(self.hparams)
        self.alphas = list(CONCEPT_ALPHAS if alphas is None else alphas)
        self.embedding_alphas = list(EMBEDDING_ALPHAS if embedding_alphas is None else embedding_alphas)
        self.bottleneck = SemanticBottleneckDecoder(
            self.alphas, self.embedding_alphas, int(cv), selection=selection, binarize=binarize
        )
        self.direct = DirectRidgeDecoder(self.alphas, int(cv), selection=selection, rescale=rescale_direct)
        self.batches: list[dict[str, Any]] = []

    def reset(self) -> None:
        self.batches = []

    def update(self, batch: dict[str, Any]) -> None:
        self.batches.append(batch)

    def compute(self) -> dict[str, Any]:
        if not self.batches:
            raise RuntimeError("SemanticBottleneckDecoding saw no batch: the test dataloader is empty")
        data = data_from_batch(self.batches[0])
        results = {"data": str(self.batches[0].get("name", "data")), **decode(data, self.bottleneck, self.direct)}
        if self.trainer.is_global_zero:
            self.report(data, results)
        return results

    def report(self, data: DecodingData, results: dict[str, Any]) -> None:
        header = ["decoder", "cosine", "2-way identification"]
        rows = [
            [name, results[f"{name}/cosine"], results[f"{name}/two_way"]]
            for name in ("bottleneck", "direct", "concepts_to_embedding")
        ]
        print_table(f"Decoding on {results['data']} (held-out stimuli)", header, rows)
        path = Path(self.trainer.default_root_dir) / Path(self.results_file).with_suffix(".png")
        image = weight_map_figure(data, self.bottleneck.weight_maps, path, f"|A| weight maps, {results['data']}")
        log_to_wandb(self.trainer, "decoding", header=header, rows=rows, images=[image])
