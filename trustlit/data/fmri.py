"""Voxels, binary concepts and target embeddings for brain decoding (:mod:`trustlit.neuro.semantic_bottleneck`):
from NSD-style files, or from the voxel simulator (a stand-in, :mod:`trustlit.neuro.simulator`).

Files in the Natural Scenes Dataset's layout (Allen et al. 2022), read by :func:`load_nsd`:

- ``betas``: one or more single-trial beta files, concatenated in the order given: ``betas_sessionNN.hdf5``
  (dataset ``betas``, [trials, X, Y, Z] or, as NSD's MATLAB-written files hold them, [trials, Z, Y, X]: the order
  that matches the mask is used; when X == Z both match, and ``beta_order`` must say which, ``xyz`` or ``zyx``)
  or ``betas_sessionNN.nii.gz`` ([X, Y, Z, trials], needs ``nibabel``). NSD stores
  int16 = percent signal change x 300: integer betas are divided by 300 (as BrainDiffuser does), float betas kept.
- ``mask``: the ROI volume [X, Y, Z] (``nsdgeneral.nii.gz`` or a ``.npy``); voxels with a value > 0 are kept
  (nsdgeneral marks the others 0 or -1).
- ``design``: the stimulus of every trial: NSD's ``nsd_expdesign.mat`` with ``subject`` (1-8): trial t showed
  nsdId ``subjectim[subject - 1, masterordering[t] - 1] - 1`` and is a test trial when ``masterordering[t] <= 1000``
  (the shared 1,000 images, BrainDiffuser's test split); or a CSV with a ``stimulus_id`` column (one row per trial)
  and an optional ``split`` column (``train``/``test``; missing: a seeded ``test_fraction`` of the stimuli).
- ``concepts``: a CSV with ``stimulus_id`` and one 0/1 column per concept (the column names are the concepts).
- ``embeddings``: a ``.npy`` [rows of the concept CSV, D]: row i is the target embedding of the CSV's row i.

The trials of one stimulus are averaged (the paper); stimuli without a concept row are dropped.

Simulated data (``source="simulated"``): stimuli are the concept-annotated texts of :mod:`trustlit.data.concepts`
(``items="fictitious"`` or ``"tofu"``) with their MiniLM embeddings as the target space
(:func:`trustlit.interpret.encoders.encode`, cached), or ``items="generated"``: random concepts with embeddings
linear in them (seconds, no encoder); voxels by :func:`~trustlit.neuro.simulator.simulate_voxels`. The test
stimuli are a seeded ``test_fraction`` of the groups (:func:`~trustlit.data.concepts.held_out_groups`): of the
authors for the texts, so no test text has a sibling description of its author in training; of the stimuli for
``generated``.

:class:`FMRIDecodingDataModule`'s test loader yields one batch (a dict): ``voxels`` [N, V], ``concepts`` [N, K],
``embeddings`` [N, D] (float32 tensors), ``test`` [N] bool, ``concept_names``, ``concept_regions`` [K] (region index,
-1 unknown), ``region_masks`` [R, V] bool (R = 0 for files), ``region_names``, ``grid`` (X, Y, Z) and
``voxel_index`` [V] (each voxel's flat index into the grid), ``name``.

Notes: docs/methods/semantic_bottleneck.md
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import lightning as L
import numpy as np
import torch
from torch.utils.data import DataLoader

from trustlit.data.concepts import concept_items, held_out_groups
from trustlit.hparams import NonNegativeFloat, NonNegativeInt, OpenUnitInterval, PositiveInt, check_arguments
from trustlit.neuro.semantic_bottleneck import check_concepts, check_matrix
from trustlit.neuro.simulator import REGIONS, simulate_voxels
from trustlit.paths import existing_file

NSD_BETA_SCALE = 300.0  # NSD's int16 betas are percent signal change x 300
NSD_SHARED_IMAGES = 1000  # masterordering <= 1000: the images every subject saw (the test split)
BetaOrder = Literal["xyz", "zyx"]
BETA_ORDERS = ("xyz", "zyx")


@dataclass(frozen=True)
class DecodingData:
    """What the decoders need (module docstring, the batch's fields)."""

    voxels: np.ndarray
    concepts: np.ndarray
    embeddings: np.ndarray
    test: np.ndarray
    concept_names: list[str]
    concept_regions: np.ndarray
    region_masks: np.ndarray
    region_names: tuple[str, ...]
    grid: tuple[int, ...]
    voxel_index: np.ndarray

    def batch(self, name: str) -> dict[str, Any]:
        as_float = {k: torch.from_numpy(np.asarray(getattr(self, k), dtype=np.float32)) for k in FLOAT_FIELDS}
        return {
            **as_float,
            "test": torch.from_numpy(self.test.astype(bool)),
            "concept_names": list(self.concept_names),
            "concept_regions": torch.from_numpy(self.concept_regions.astype(np.int64)),
            "region_masks": torch.from_numpy(self.region_masks.astype(bool)),
            "region_names": list(self.region_names),
            "grid": list(self.grid),
            "voxel_index": torch.from_numpy(self.voxel_index.astype(np.int64)),
            "name": name,
        }


FLOAT_FIELDS = ("voxels", "concepts", "embeddings")


def data_from_batch(batch: dict[str, Any]) -> DecodingData:
    """The :class:`DecodingData` a :class:`FMRIDecodingDataModule` batch carries (float64 arrays)."""
    arrays = {k: batch[k].detach().cpu().numpy().astype(np.float64) for k in FLOAT_FIELDS}
    return DecodingData(
        **arrays,
        test=batch["test"].cpu().numpy(),
        concept_names=list(batch["concept_names"]),
        concept_regions=batch["concept_regions"].cpu().numpy(),
        region_masks=batch["region_masks"].cpu().numpy(),
        region_names=tuple(batch["region_names"]),
        grid=tuple(int(n) for n in batch["grid"]),
        voxel_index=batch["voxel_index"].cpu().numpy(),
    )


# -- files --------------------------------------------------------------------------------------------------------


def read_volume(path: Path) -> np.ndarray:
    """A NIfTI (``.nii``/``.nii.gz``, with nibabel) or ``.npy`` array."""
    if path.name.endswith((".nii", ".nii.gz")):
        try:
            import nibabel
        except ImportError:
            raise ImportError(
                f"{path}: reading NIfTI needs nibabel (pip install nibabel), or pass .hdf5/.npy"
            ) from None
        return np.asarray(nibabel.load(str(path)).dataobj)
    if path.suffix == ".npy":
        return np.load(path)
    raise ValueError(f"{path}: unknown volume format, expected .nii, .nii.gz or .npy")


def load_mask(path: str | Path) -> np.ndarray:
    """The ROI [X, Y, Z] as bool (value > 0)."""
    mask = read_volume(existing_file(path, "mask"))
    if mask.ndim != 3:
        raise ValueError(f"{path}: the ROI mask has shape {mask.shape}, expected a 3-D volume [X, Y, Z]")
    if not (mask > 0).any():
        raise ValueError(f"{path}: the ROI mask selects no voxel (no value > 0)")
    return mask > 0


def load_betas(path: str | Path, mask: np.ndarray, order: BetaOrder | None = None) -> np.ndarray:
    """One session's betas inside ``mask``, [trials, V] float32 (int16 divided by 300); ``order``: the spatial axes
    of an HDF5 file, ``xyz`` or NSD's MATLAB ``zyx`` (None: the one that matches the mask, which X == Z needs)."""
    path = existing_file(path, "betas")
    if order not in (None, *BETA_ORDERS):
        raise ValueError(f"beta_order={order!r} is invalid, expected None, 'xyz' or 'zyx'")
    if path.suffix in (".hdf5", ".h5"):
        import h5py

        with h5py.File(path, "r") as handle:
            if "betas" not in handle:
                raise ValueError(f"{path}: no 'betas' dataset (found {sorted(handle)})")
            betas = handle["betas"][()]
        selected = hdf5_volume(betas, mask, order, path)[:, mask]
    else:
        betas = read_volume(path)
        if betas.ndim != 4 or betas.shape[:3] != mask.shape:
            raise ValueError(f"{path}: betas {betas.shape} do not match the mask {mask.shape} as [X, Y, Z, trials]")
        selected = betas[mask].T
    integer = np.issubdtype(selected.dtype, np.integer)
    return (selected.astype(np.float32) / NSD_BETA_SCALE) if integer else selected.astype(np.float32)


def hdf5_volume(betas: np.ndarray, mask: np.ndarray, order: BetaOrder | None, path: Path) -> np.ndarray:
    """HDF5 betas as [trials, X, Y, Z]: as stored (``xyz``) or transposed from NSD's MATLAB [trials, Z, Y, X]."""
    matches = [o for o, shape in (("xyz", mask.shape), ("zyx", mask.shape[::-1])) if betas.shape[1:] == shape]
    if order is None and len(matches) == 2:  # X == Z: both orders fit the mask
        raise ValueError(
            f"{path}: betas {betas.shape} fit the mask {mask.shape} as [trials, X, Y, Z] and as NSD's MATLAB "
            "[trials, Z, Y, X] (X == Z): pass beta_order='xyz' or 'zyx'"
        )
    chosen = order or (matches[0] if matches else None)
    if chosen not in matches:
        expected = "[trials, X, Y, Z] or [trials, Z, Y, X]" if order is None else f"beta_order={order!r}"
        raise ValueError(f"{path}: betas {betas.shape} do not match the mask {mask.shape} as {expected}")
    return betas if chosen == "xyz" else betas.transpose(0, 3, 2, 1)


def load_design(
    path: str | Path, trials: int, subject: int | None, test_fraction: float, seed: int
) -> tuple[np.ndarray, dict[str, bool]]:
    """The stimulus id of each of ``trials`` trials and which stimuli are test stimuli (module docstring)."""
    path = existing_file(path, "design")
    if path.suffix == ".mat":
        from scipy.io import loadmat

        if subject is None or not 1 <= subject <= 8:
            raise ValueError(f"subject={subject!r} is invalid, expected 1..8 with NSD's nsd_expdesign.mat")
        design = loadmat(path, squeeze_me=True)
        order = np.asarray(design["masterordering"]).astype(np.int64)[:trials]
        if len(order) < trials:
            raise ValueError(f"{path}: masterordering has {len(order)} trials, the betas {trials}")
        ids = np.asarray(design["subjectim"])[subject - 1, order - 1].astype(np.int64) - 1
        is_test = {str(i): bool(o <= NSD_SHARED_IMAGES) for i, o in zip(ids, order, strict=True)}
        return ids.astype(str), is_test
    rows = read_csv(path, "stimulus_id")
    if len(rows) != trials:
        raise ValueError(f"{path}: {len(rows)} trial rows, the betas have {trials} trials")
    ids = np.array([row["stimulus_id"] for row in rows])
    if "split" in rows[0]:
        splits = {row["split"] for row in rows} - {"train", "test"}
        if splits:
            raise ValueError(f"{path}: split values {sorted(splits)} are invalid, expected 'train' or 'test'")
        return ids, {row["stimulus_id"]: row["split"] == "test" for row in rows}
    unique = np.unique(ids)
    chosen = set(np.random.default_rng(seed).permutation(unique)[: round(test_fraction * len(unique))].tolist())
    return ids, {i: i in chosen for i in unique}


def read_csv(path: Path, required: str) -> list[dict[str, str]]:
    with path.open(encoding="utf-8", newline="") as handle:
        rows = list(csv.DictReader(handle))
    if not rows or required not in rows[0]:
        raise ValueError(f"{path}: expected a header with a '{required}' column and at least one row")
    return rows


def load_concepts(path: str | Path) -> tuple[list[str], list[str], np.ndarray]:
    """Stimulus ids, concept names and the 0/1 matrix [rows, K] of a concept CSV."""
    path = existing_file(path, "concepts")
    rows = read_csv(path, "stimulus_id")
    names = [name for name in rows[0] if name != "stimulus_id"]
    if not names:
        raise ValueError(f"{path}: no concept columns besides 'stimulus_id'")
    try:
        values = np.array([[float(row[name]) for name in names] for row in rows])
    except (TypeError, ValueError) as error:
        raise ValueError(f"{path}: concept values must be 0 or 1 ({error})") from None
    return [row["stimulus_id"] for row in rows], names, check_concepts(values)


def _trial_means(trials: np.ndarray, ids: np.ndarray) -> tuple[np.ndarray, list]:
    """The mean response per stimulus, in the order the design first lists them, and that order: one pass over the
    trials (a scan of every trial per stimulus would cost trials x stimuli)."""
    unique, first, inverse = np.unique(ids, return_index=True, return_inverse=True)
    sums = np.zeros((len(unique), trials.shape[1]))
    np.add.at(sums, inverse, trials)
    listed = np.argsort(first)
    return (sums / np.bincount(inverse)[:, None])[listed], unique[listed].tolist()


def load_nsd(
    betas: list[str],
    mask: str,
    design: str,
    concepts: str,
    embeddings: str,
    *,
    subject: int | None = None,
    test_fraction: float = 0.1,
    seed: int = 0,
    beta_order: BetaOrder | None = None,
) -> DecodingData:
    """NSD-style files as :class:`DecodingData` (module docstring): trials averaged per stimulus."""
    if not betas:
        raise ValueError("betas=[] is invalid, expected one or more beta files (betas_sessionNN.hdf5 / .nii.gz)")
    roi = load_mask(mask)
    trials = np.concatenate([load_betas(path, roi, beta_order) for path in betas])
    ids, is_test = load_design(design, len(trials), subject, test_fraction, seed)
    stimulus_ids, names, concept_matrix = load_concepts(concepts)
    targets = check_matrix(np.load(existing_file(embeddings, "embeddings")), "embeddings")
    if len(targets) != len(stimulus_ids):
        raise ValueError(f"{embeddings}: {len(targets)} rows, the concept CSV {concepts} has {len(stimulus_ids)}")
    row_of = {sid: i for i, sid in enumerate(stimulus_ids)}
    means, order = _trial_means(trials, ids)
    positions = [i for i, sid in enumerate(order) if sid in row_of]
    if not positions:
        raise ValueError(f"no stimulus of {design} has a row in {concepts} (compare their stimulus ids)")
    kept = [order[i] for i in positions]
    voxels = means[positions]
    rows = [row_of[sid] for sid in kept]
    return DecodingData(
        voxels=check_matrix(voxels, "voxels"),
        concepts=concept_matrix[rows],
        embeddings=targets[rows],
        test=np.array([is_test[sid] for sid in kept]),
        concept_names=names,
        concept_regions=np.full(len(names), -1),
        region_masks=np.zeros((0, voxels.shape[1]), dtype=bool),
        region_names=(),
        grid=roi.shape,
        voxel_index=np.flatnonzero(roi),
    )


# -- simulated ----------------------------------------------------------------------------------------------------


def generated_stimuli(n: int, concepts: int, dim: int, seed: int) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """Random concepts (each present with probability 0.25) and embeddings h = unit(c M + 0.1 e): a target space
    linear in the concepts up to noise, standing in for an encoder."""
    rng = np.random.default_rng(seed)
    c = (rng.random((n, concepts)) < 0.25).astype(np.float64)
    h = c @ rng.normal(size=(concepts, dim)) + 0.1 * rng.normal(size=(n, dim))
    return c, h / np.linalg.norm(h, axis=1, keepdims=True), [f"concept {k}" for k in range(concepts)]


def text_stimuli(
    items: str,
    num_authors: int | None,
    variants: int,
    seed: int,
    cache_dir: str | Path | None,
    tofu_dir: str | Path | None = None,
) -> tuple[np.ndarray, np.ndarray, list[str], np.ndarray]:
    """The concept-annotated author texts' concepts, MiniLM embeddings, concept names and authors (one per text)."""
    from trustlit.interpret.encoders import encode

    annotated = concept_items(
        items, num_authors=num_authors, variants_per_author=variants, seed=seed, tofu_dir=tofu_dir
    )
    embeddings = encode(annotated.texts, "minilm", cache_dir=cache_dir)
    authors = np.array(annotated.authors)
    return annotated.concepts.astype(np.float64), embeddings.astype(np.float64), list(annotated.concept_names), authors


def simulated_data(
    concepts: np.ndarray,
    embeddings: np.ndarray,
    concept_names: list[str],
    *,
    grid: tuple[int, int, int],
    noise: float,
    nuisance: float,
    gain_spread: float,
    test_fraction: float,
    seed: int,
    groups: np.ndarray | None = None,
) -> DecodingData:
    """Stimuli with simulated voxels (:func:`~trustlit.neuro.simulator.simulate_voxels` at ``seed``), the stimuli
    of a seeded ``test_fraction`` of the ``groups`` (one per stimulus; None: each stimulus its own) held out."""
    sim = simulate_voxels(
        concepts, concept_names, grid=grid, noise=noise, nuisance=nuisance, gain_spread=gain_spread, seed=seed
    )
    if groups is None:
        groups = np.arange(len(concepts))
    elif len(groups) != len(concepts):
        raise ValueError(f"groups has {len(groups)} entries, expected one per stimulus ({len(concepts)})")
    test = held_out_groups(np.asarray(groups), test_fraction, seed)
    return DecodingData(
        voxels=sim.voxels.astype(np.float64),
        concepts=concepts,
        embeddings=embeddings,
        test=test,
        concept_names=concept_names,
        concept_regions=sim.concept_regions,
        region_masks=sim.region_masks,
        region_names=REGIONS,
        grid=sim.grid,
        voxel_index=np.arange(sim.voxels.shape[1]),
    )


class FMRIDecodingDataModule(L.LightningDataModule):
    """Voxels, concepts and target embeddings for the decoding analysis (module docstring).

    Args:
        source: ``simulated`` (the stand-in voxel simulator) or ``nsd`` (files in NSD's layout).
        items: the simulated stimuli: ``fictitious`` / ``tofu`` author texts with MiniLM embeddings, or
            ``generated`` (``num_stimuli`` x ``num_concepts`` random concepts, no encoder).
        num_authors, variants_per_author: sizes of the text items (:func:`trustlit.data.concepts.concept_items`).
        grid, noise, nuisance, gain_spread: the simulator's (:func:`~trustlit.neuro.simulator.simulate_voxels`).
        test_fraction: held out: of the authors (``fictitious`` / ``tofu``: whole authors), of the stimuli
            (``generated``; files without a split).
        seed: seeds the stimuli, the simulator and the split.
        cache_dir: where the MiniLM embeddings are cached (None: not cached).
        tofu_dir: the directory with TOFU's ``full.json`` (``items: tofu``).
        betas, mask, design, concepts, embeddings, subject: the ``nsd`` files (:func:`load_nsd`).
        beta_order: the spatial axes of HDF5 betas, ``xyz`` or NSD's MATLAB ``zyx`` (None: the one matching the
            mask; needed when X == Z).

    Notes: docs/methods/semantic_bottleneck.md
    """

    def __init__(
        self,
        source: Literal["simulated", "nsd"] = "simulated",
        items: Literal["fictitious", "tofu", "generated"] = "generated",
        num_stimuli: PositiveInt = 400,
        num_concepts: PositiveInt = 12,
        num_authors: PositiveInt | None = None,
        variants_per_author: PositiveInt = 5,
        grid: tuple[int, int, int] = (20, 20, 8),
        noise: NonNegativeFloat = 1.0,
        nuisance: NonNegativeFloat = 0.5,
        gain_spread: NonNegativeFloat = 0.3,
        test_fraction: OpenUnitInterval = 0.2,
        seed: NonNegativeInt = 0,
        cache_dir: str | None = None,
        tofu_dir: str | None = None,
        betas: list[str] | None = None,
        mask: str | None = None,
        design: str | None = None,
        concepts: str | None = None,
        embeddings: str | None = None,
        subject: int | None = None,
        beta_order: BetaOrder | None = None,
    ) -> None:
        super().__init__()
        check_arguments(FMRIDecodingDataModule.__init__, locals())
        if source not in ("simulated", "nsd"):
            raise ValueError(f"source={source!r} is invalid, expected 'simulated' or 'nsd'")
        if source == "nsd":
            missing = [k for k, v in {"betas": betas, "mask": mask, "design": design}.items() if not v]
            missing += [k for k, v in {"concepts": concepts, "embeddings": embeddings}.items() if not v]
            if missing:
                raise ValueError(f"source='nsd' needs {', '.join(missing)} (paths to NSD-style files)")
        elif items not in ("fictitious", "tofu", "generated"):
            raise ValueError(f"items={items!r} is invalid, expected 'fictitious', 'tofu' or 'generated'")
        self.save_hyperparameters()
        self.data: DecodingData | None = None

    def setup(self, stage: str | None = None) -> None:
        if self.data is not None:
            return
        hp = self.hparams
        if hp.source == "nsd":
            self.data = load_nsd(
                list(hp.betas),
                hp.mask,
                hp.design,
                hp.concepts,
                hp.embeddings,
                subject=hp.subject,
                test_fraction=float(hp.test_fraction),
                seed=int(hp.seed),
                beta_order=hp.beta_order,
            )
            return
        groups = None  # generated stimuli: each its own group
        if hp["items"] == "generated":
            stimuli = generated_stimuli(int(hp.num_stimuli), int(hp.num_concepts), 64, int(hp.seed))
        else:
            *stimuli, groups = text_stimuli(
                hp["items"], hp.num_authors, int(hp.variants_per_author), int(hp.seed), hp.cache_dir, hp.tofu_dir
            )
        self.data = simulated_data(
            *stimuli,
            groups=groups,
            grid=tuple(int(n) for n in hp.grid),
            noise=float(hp.noise),
            nuisance=float(hp.nuisance),
            gain_spread=float(hp.gain_spread),
            test_fraction=float(hp.test_fraction),
            seed=int(hp.seed),
        )

    @property
    def name(self) -> str:
        hp = self.hparams
        return "nsd" if hp.source == "nsd" else f"simulated_{hp['items']}"

    def test_dataloader(self) -> DataLoader:
        self.setup("test")
        return DataLoader([self.data.batch(self.name)], batch_size=None)
