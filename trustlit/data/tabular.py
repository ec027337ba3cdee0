"""Tabular classification data: scikit-learn's bundled sets or a CSV file.

Batches are tuples ``(x, y, index)`` (float32 features, int64 labels, int64 sample index),
the shape Opacus's DP data loader expects.

Feature scaling is fitted on the training split only. ``row_norm`` bounds every row's L2
norm by 1, which DP output perturbation and DP-SGD sensitivity analyses assume:
``normalize`` maps x to x / ||x||, ``clip`` to x * min(1, 1 / ||x||). Note that ``standard``
and ``minmax`` statistics come from the (private) training data and are not privatised;
strict DP pipelines scale with public statistics or use ``row_norm`` alone.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Literal

import lightning as L
import numpy as np
import torch
from sklearn import datasets as sk_datasets
from sklearn.model_selection import train_test_split
from torch.utils.data import DataLoader, TensorDataset

from trustlit.data.samplers import EpochSeededSampler, ResumableDataLoader
from trustlit.hparams import NonNegativeInt, PositiveInt, check_arguments
from trustlit.paths import read_utf8

SKLEARN_DATASETS = {
    "digits": sk_datasets.load_digits,
    "wine": sk_datasets.load_wine,
    "iris": sk_datasets.load_iris,
    "breast_cancer": sk_datasets.load_breast_cancer,
}
Scaling = Literal["none", "standard", "minmax"]
RowNorm = Literal["none", "normalize", "clip"]


def load_table(name_or_csv: str, target_column: str | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Features and integer labels of a bundled dataset or of a CSV file with a header."""
    if name_or_csv in SKLEARN_DATASETS:
        bunch = SKLEARN_DATASETS[name_or_csv]()
        return bunch.data.astype(np.float64), bunch.target.astype(np.int64)
    path = Path(name_or_csv).expanduser()
    if path.suffix != ".csv":
        raise ValueError(f"dataset '{name_or_csv}' is neither one of {sorted(SKLEARN_DATASETS)} nor a .csv file")
    if not path.is_file():
        raise FileNotFoundError(f"CSV file not found: {path}")
    if target_column is None:
        raise ValueError(f"{path}: set target_column to the name of the label column")
    text = read_utf8(path)
    header = text.partition("\n")[0].strip().split(",")
    if target_column not in header:
        raise ValueError(f"{path}: no column '{target_column}' (columns: {header})")
    table = np.genfromtxt(io.StringIO(text), delimiter=",", skip_header=1, dtype=np.float64, ndmin=2)
    table = table.reshape(len(table), -1) if table.size else table.reshape(0, len(header))
    if len(table) == 0:
        raise ValueError(f"{path}: the dataset is empty")
    target = header.index(target_column)
    if np.isnan(table[:, target]).any():
        row = int(np.argwhere(np.isnan(table[:, target]))[0][0]) + 2
        raise ValueError(
            f"{path}:{row}: the label column '{target_column}' must hold numbers (class ids); "
            "map class names to integers first"
        )
    if np.isnan(table).any():
        row, column = (int(i) for i in np.argwhere(np.isnan(table))[0])
        raise ValueError(f"{path}:{row + 2}: column '{header[column]}' is missing or not a number")
    _, labels = np.unique(table[:, target], return_inverse=True)
    return np.delete(table, target, axis=1), labels.astype(np.int64)


def scale_features(train: np.ndarray, others: list[np.ndarray], scaling: Scaling) -> list[np.ndarray]:
    """Scale ``train`` and ``others`` with statistics of ``train``."""
    if scaling == "none":
        return [train, *others]
    if scaling == "standard":
        center, scale = train.mean(axis=0), train.std(axis=0)
    elif scaling == "minmax":
        center, scale = train.min(axis=0), train.max(axis=0) - train.min(axis=0)
    else:
        raise ValueError(f"scaling must be 'none', 'standard' or 'minmax', got '{scaling}'")
    scale = np.where(scale > 0, scale, 1.0)
    return [(x - center) / scale for x in (train, *others)]


def bound_row_norms(x: np.ndarray, row_norm: RowNorm) -> np.ndarray:
    """Bound every row's L2 norm by 1 (see the module docstring)."""
    if row_norm == "none":
        return x
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    if row_norm == "normalize":
        return x / np.where(norms > 0, norms, 1.0)
    if row_norm == "clip":
        return x / np.maximum(norms, 1.0)
    raise ValueError(f"row_norm must be 'none', 'normalize' or 'clip', got '{row_norm}'")


class TabularDataModule(L.LightningDataModule):
    """A stratified, seeded train/val/test split of a tabular classification dataset.

    Args:
        dataset: ``digits``, ``wine``, ``iris``, ``breast_cancer``, or a path to a CSV file.
        target_column: the label column of a CSV file.
        val_fraction, test_fraction: shares of the data held out, stratified by label.
        scaling: ``standard``, ``minmax`` or ``none``, fitted on the training split.
        row_norm: ``normalize``, ``clip`` (both give ||x|| <= 1) or ``none``, after scaling.
        batch_size: batch size of every loader.
        seed: seeds the split and the training order.
    """

    def __init__(
        self,
        dataset: str = "digits",
        target_column: str | None = None,
        val_fraction: float = 0.1,
        test_fraction: float = 0.2,
        scaling: Scaling = "standard",
        row_norm: RowNorm = "none",
        batch_size: PositiveInt = 64,
        num_workers: NonNegativeInt = 0,
        seed: int = 0,
    ) -> None:
        super().__init__()
        check_arguments(TabularDataModule.__init__, locals())
        if not (0 <= val_fraction < 1 and 0 < test_fraction < 1 and val_fraction + test_fraction < 1):
            raise ValueError(
                f"val_fraction ({val_fraction}) and test_fraction ({test_fraction}) must lie in "
                "[0, 1) and (0, 1) and sum to less than 1"
            )
        self.dataset, self.target_column = dataset, target_column
        self.val_fraction, self.test_fraction = val_fraction, test_fraction
        self.scaling, self.row_norm = scaling, row_norm
        self.batch_size, self.num_workers, self.seed = batch_size, num_workers, seed
        self.splits: dict[str, TensorDataset] = {}

    @property
    def num_features(self) -> int:
        return self.splits["train"].tensors[0].shape[1]

    @property
    def num_classes(self) -> int:
        return int(self.splits["train"].tensors[1].max()) + 1

    def setup(self, stage: str | None = None) -> None:
        if self.splits:
            return
        features, labels = load_table(self.dataset, self.target_column)
        index = np.arange(len(labels))
        rest, test = train_test_split(index, test_size=self.test_fraction, stratify=labels, random_state=self.seed)
        val_share = self.val_fraction / (1 - self.test_fraction)
        train, val = (
            train_test_split(rest, test_size=val_share, stratify=labels[rest], random_state=self.seed)
            if self.val_fraction > 0
            else (rest, rest[:0])
        )
        parts = scale_features(features[train], [features[val], features[test]], self.scaling)
        for name, idx, x in zip(("train", "val", "test"), (train, val, test), parts, strict=True):
            x = bound_row_norms(x, self.row_norm)
            # index is the sample's position within its split, as for every trustlit dataset
            self.splits[name] = TensorDataset(
                torch.as_tensor(x, dtype=torch.float32),
                torch.as_tensor(labels[idx]),
                torch.arange(len(idx)),
            )

    def train_dataloader(self) -> DataLoader:
        train = self.splits["train"]
        return ResumableDataLoader(
            train,
            batch_size=self.batch_size,
            sampler=EpochSeededSampler(len(train), self.seed),
            num_workers=self.num_workers,
        )

    def val_dataloader(self) -> DataLoader:
        return DataLoader(self.splits["val"], batch_size=self.batch_size, num_workers=self.num_workers)

    def test_dataloader(self) -> DataLoader:
        return DataLoader(self.splits["test"], batch_size=self.batch_size, num_workers=self.num_workers)


def check_feature_count(num_features: int, datamodule: object) -> None:
    """Refuse, at setup, a model built for ``num_features`` inputs on data of another width (any data module with a
    ``num_features``; a TabularDataModule once it is set up), naming both (the mismatch would otherwise surface as a
    shape error deep in the first forward)."""
    if isinstance(datamodule, TabularDataModule) and "train" not in datamodule.splits:
        return
    width = getattr(datamodule, "num_features", None)
    if width is not None and num_features != width:
        raise ValueError(
            f"model.init_args.num_features={num_features} but the data ({type(datamodule).__name__}) has "
            f"{datamodule.num_features} features: set --model.init_args.num_features={datamodule.num_features}"
        )
