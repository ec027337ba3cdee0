"""Harvested activations (:class:`trustlit.llm.harvest.HarvestActivations`) served memory-mapped.

A batch is ``{"activations": [B, D] float32, "index": [B] long, "row": [B] long, "token_position": [B] long,
"harvest": [B] long}``: the rows of one ``(site, layer)`` tensor, upcast from the stored dtype; ``index`` is
the row's sample index (the harvested batch's ``index``), ``row`` its global row id (harvests in the order
given, shards in ``index.json`` order).

Nothing is loaded whole: each shard's tensor is a read-only ``numpy.memmap`` over the safetensors
data region (8-byte header length, JSON header, then raw little-endian data), opened on first use
in each process, so a harvest larger than memory trains. Only the per-row sample keys
(``sample_index``, ``dataloader_index``: 16 bytes a row, and ``token_position`` with
``min_token_position``) are read at setup, to split and filter.

Several harvests of one model (e.g. TOFU and the invented-author corpus, harvested apart) are served
as one: ``path`` takes a list, their rows follow one another in that order, and ``harvest`` [B] says
which a row comes from (``index`` is its sample index within that harvest).

Train and validation are split by *sample* (a ``(harvest, dataloader_index, sample_index)`` triple), so the
tokens of one sample never straddle the two: a seeded permutation of the samples puts the first
``round(val_fraction * num_samples)`` in validation. The train rows come in the order of
:class:`~trustlit.data.samplers.EpochSeededSampler` (fixed by seed and epoch, resumable); the
validation rows in row order.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, NamedTuple

import lightning as L
import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

from trustlit.data.samplers import EpochSeededSampler, ResumableDataLoader
from trustlit.hparams import ClosedUnitInterval, NonNegativeInt, PositiveInt, check_arguments
from trustlit.llm.harvest import INDEX_FILE, INDEX_KEYS, Site, tensor_name

# safetensors dtype -> numpy dtype of the raw bytes (bfloat16 is read as uint16 and viewed by torch)
NUMPY_DTYPES = {"F32": np.float32, "F16": np.float16, "BF16": np.uint16, "I64": np.int64}
HARVEST_HINT = "run `trustlit predict -c <recipe>` with the HarvestActivations callback (recipes/interpret/)"


def index_path(path: str | Path) -> Path:
    """``index.json`` of a harvest directory (or the file itself)."""
    path = Path(path).expanduser()
    return path if path.name == INDEX_FILE else path / INDEX_FILE


def read_index(path: str | Path) -> dict[str, Any]:
    """The ``index.json`` of a harvest, checked: a missing file, bad JSON or a missing key is one line."""
    file = index_path(path)
    if not file.is_file():
        raise FileNotFoundError(f"no activation index at {file}: {HARVEST_HINT}")
    try:
        index = json.loads(file.read_text(encoding="utf-8"))
    except json.JSONDecodeError as error:
        raise ValueError(
            f"{file}: malformed activation index, not valid JSON ({error.msg}, line {error.lineno})"
        ) from None
    if not isinstance(index, dict):
        raise ValueError(f"{file}: malformed activation index, expected a JSON object")
    for key in INDEX_KEYS:
        if key not in index:
            raise ValueError(f"{file}: malformed activation index, missing key '{key}'")
    shards = index["shards"]
    if not isinstance(shards, list) or not all(isinstance(s, dict) and {"file", "rows"} <= s.keys() for s in shards):
        raise ValueError(f"{file}: malformed activation index, key 'shards' must be a list of {{file, rows}}")
    if sum(s["rows"] for s in shards) != index["total_rows"]:
        raise ValueError(f"{file}: malformed activation index, key 'total_rows' is not the sum of the shards' rows")
    return index


def safetensors_layout(path: Path) -> tuple[int, dict[str, Any]]:
    """``(data_start, header)`` of a safetensors file: tensors' ``dtype``, ``shape`` and ``data_offsets``."""
    with path.open("rb") as handle:
        size = int.from_bytes(handle.read(8), "little")
        header = json.loads(handle.read(size))
    return 8 + size, header


def memmap_tensor(path: Path, name: str) -> np.memmap:
    """A read-only memory map of tensor ``name`` in the safetensors file ``path`` (nothing is read)."""
    start, header = safetensors_layout(path)
    if name not in header:
        raise ValueError(f"{path}: no tensor '{name}' in the shard (it holds {sorted(set(header) - {'__metadata__'})})")
    info = header[name]
    if info["dtype"] not in NUMPY_DTYPES:
        raise ValueError(f"{path}: tensor '{name}' has dtype {info['dtype']}, expected one of {list(NUMPY_DTYPES)}")
    offset = start + info["data_offsets"][0]
    return np.memmap(path, dtype=NUMPY_DTYPES[info["dtype"]], mode="r", offset=offset, shape=tuple(info["shape"]))


class ShardedTensor:
    """One named tensor across the shards of a harvest, read by global row ids through memory maps.

    The maps open on first read in each process (a DataLoader worker maps its own; pickling sends
    only the paths).
    """

    def __init__(self, files: list[Path], rows: list[int], name: str) -> None:
        self.files = files
        self.name = name
        self.starts = np.concatenate([[0], np.cumsum(rows)]).astype(np.int64)
        self._maps: dict[int, np.memmap] = {}

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_maps": {}}

    def shard(self, number: int) -> np.memmap:
        if number not in self._maps:
            self._maps[number] = memmap_tensor(self.files[number], self.name)
        return self._maps[number]

    def read(self, rows: np.ndarray) -> np.ndarray:
        """The values at global ``rows`` (any order), read shard by shard in ascending row order."""
        order = np.argsort(rows, kind="stable")
        ordered = rows[order]
        shards = np.searchsorted(self.starts, ordered, side="right") - 1
        parts = [self.shard(s)[ordered[shards == s] - self.starts[s]] for s in np.unique(shards)]
        values = np.concatenate(parts)
        result = np.empty_like(values)
        result[order] = values
        return result


def as_float_tensor(values: np.ndarray, stored_dtype: str) -> torch.Tensor:
    tensor = torch.from_numpy(values)
    return (tensor.view(torch.bfloat16) if stored_dtype == "bfloat16" else tensor).float()


class ActivationRows(Dataset):
    """The rows ``rows`` (global ids) of one harvested tensor; ``__getitems__`` reads a whole batch at once."""

    def __init__(
        self,
        activations: ShardedTensor,
        positions: ShardedTensor,
        sample_index: np.ndarray,
        rows: np.ndarray,
        stored_dtype: str,
        harvest_starts: np.ndarray,
    ) -> None:
        self.activations = activations
        self.positions = positions
        self.sample_index = sample_index
        self.rows = rows
        self.stored_dtype = stored_dtype
        self.harvest_starts = harvest_starts  # the first global row of each harvest

    def __len__(self) -> int:
        return len(self.rows)

    def __getitems__(self, items: list[int]) -> dict[str, torch.Tensor]:
        rows = self.rows[np.asarray(items, dtype=np.int64)]
        return {
            "activations": as_float_tensor(self.activations.read(rows), self.stored_dtype),
            "index": torch.from_numpy(self.sample_index[rows]),
            "row": torch.from_numpy(rows),
            "token_position": torch.from_numpy(self.positions.read(rows)),
            "harvest": torch.from_numpy(np.searchsorted(self.harvest_starts, rows, side="right") - 1),
        }

    def __getitem__(self, item: int) -> dict[str, torch.Tensor]:
        return {key: value[0] for key, value in self.__getitems__([item]).items()}


def as_batch(batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Collate of :class:`ActivationRows`: ``__getitems__`` has made the batch already."""
    return batch


def split_by_sample(sample_keys: np.ndarray, val_fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """``(train_rows, val_rows)``: the rows of a seeded ``round(val_fraction * num_samples)`` samples go to val."""
    samples, inverse = np.unique(sample_keys, return_inverse=True)
    order = torch.randperm(len(samples), generator=torch.Generator().manual_seed(seed)).numpy()
    in_val = np.zeros(len(samples), dtype=bool)
    in_val[order[: round(val_fraction * len(samples))]] = True
    val = in_val[inverse]
    return np.flatnonzero(~val), np.flatnonzero(val)


class Harvest(NamedTuple):
    """One harvest directory: its checked ``index.json`` and its shard files."""

    path: Path
    index: dict[str, Any]
    files: list[Path]


def read_harvest(path: str | Path) -> Harvest:
    """The harvest at ``path`` (its directory or ``index.json``), its index checked."""
    index = read_index(path)
    directory = index_path(path).parent
    return Harvest(directory, index, [directory / shard["file"] for shard in index["shards"]])


def check_shards(harvest: Harvest) -> None:
    """One line naming the first shard file of ``harvest`` that is missing."""
    for file in harvest.files:
        if not file.is_file():
            raise FileNotFoundError(f"shard {file} named by {index_path(harvest.path)} is missing: harvest again")


# What the harvests served together must share, or their rows could not be one tensor.
SHARED_KEYS = ("hidden_size", "num_layers", "dtype")


def check_compatible(harvests: list[Harvest]) -> None:
    """One line naming the first harvest that differs from the first in a :data:`SHARED_KEYS` value."""
    first = harvests[0]
    for other in harvests[1:]:
        for key in SHARED_KEYS:
            if other.index[key] != first.index[key]:
                raise ValueError(
                    f"harvests {first.path} and {other.path} differ in {key} ({first.index[key]} vs "
                    f"{other.index[key]}): only harvests of one model, in one dtype, can be served together"
                )


class ActivationDataModule(L.LightningDataModule):
    """Rows of one ``(site, layer)`` of one or more harvests, split into train/val by sample (module docstring).

    Args:
        path: the harvest directory (``HarvestActivations.output_dir``) or its ``index.json``; or a list
            of them, harvests of one model served one after another.
        layer: a harvested decoder-layer index (negative counts from the model's last layer).
        site: ``residual``, ``mlp`` or ``attention``, as harvested.
        val_fraction: share of the samples (not rows) held out for validation.
        batch_size: rows per batch.
        seed: seeds the split and the training order (with the epoch).
        num_workers: DataLoader workers (each maps the shards itself).
        min_token_position: rows at token positions below it are left out. 1 drops each sample's first
            token, an attention sink in many LMs (SmolLM2's layer-15 state there has about 140x the norm
            of the others and is the same in every sample), which would dominate a reconstruction loss.
    """

    def __init__(
        self,
        path: str | list[str],
        layer: int,
        site: Site = "residual",
        val_fraction: ClosedUnitInterval = 0.1,
        batch_size: PositiveInt = 4096,
        seed: int = 0,
        num_workers: NonNegativeInt = 0,
        min_token_position: NonNegativeInt = 0,
    ) -> None:
        super().__init__()
        check_arguments(ActivationDataModule.__init__, locals())
        paths = [path] if isinstance(path, str) else list(path)
        if not paths:
            raise ValueError("ActivationDataModule: path=[] names no harvest; give a harvest directory or a list")
        self.harvests = [read_harvest(p) for p in paths]
        check_compatible(self.harvests)
        self.path, self.index = self.harvests[0].path, self.harvests[0].index  # what the harvests share
        self.layer = self._harvested_layer(layer)
        self.site = self._harvested_site(site)
        for harvest in self.harvests:
            check_shards(harvest)
        self.val_fraction = float(val_fraction)
        self.batch_size = int(batch_size)
        self.seed = seed
        self.num_workers = int(num_workers)
        self.min_token_position = int(min_token_position)
        self.train_dataset: ActivationRows | None = None
        self.val_dataset: ActivationRows | None = None

    @property
    def hidden_size(self) -> int:
        """D, the width of ``activations``."""
        return int(self.index["hidden_size"])

    def _harvested_layer(self, layer: int) -> int:
        resolved = layer % self.index["num_layers"] if -self.index["num_layers"] <= layer < 0 else layer
        for harvest in self.harvests:
            if resolved not in harvest.index["layers"]:
                available = harvest.index["layers"]
                raise ValueError(f"layer {layer} was not harvested in {harvest.path}: available layers {available}")
        return resolved

    def _harvested_site(self, site: str) -> str:
        for harvest in self.harvests:
            if site not in harvest.index["sites"]:
                available = harvest.index["sites"]
                raise ValueError(f"site '{site}' was not harvested in {harvest.path}: available sites {available}")
        return site

    def sharded(self, name: str) -> ShardedTensor:
        """Tensor ``name`` across the shards of every harvest, in order."""
        files = [file for harvest in self.harvests for file in harvest.files]
        rows = [shard["rows"] for harvest in self.harvests for shard in harvest.index["shards"]]
        return ShardedTensor(files, rows, name)

    def setup(self, stage: str) -> None:
        if self.train_dataset is not None:
            return
        total_rows = [harvest.index["total_rows"] for harvest in self.harvests]
        harvest_starts = np.concatenate([[0], np.cumsum(total_rows)[:-1]]).astype(np.int64)
        every_row = np.arange(sum(total_rows), dtype=np.int64)
        sample_index = self.sharded("sample_index").read(every_row)
        dataloader_index = self.sharded("dataloader_index").read(every_row)
        harvest = np.repeat(np.arange(len(total_rows), dtype=np.int64), total_rows)
        samples, dataloaders = int(sample_index.max(initial=0)) + 1, int(dataloader_index.max(initial=0)) + 1
        sample_keys = (harvest * dataloaders + dataloader_index) * samples + sample_index
        train, val = split_by_sample(sample_keys, self.val_fraction, self.seed)
        positions = self.sharded("token_position")
        if self.min_token_position > 0:
            kept = positions.read(every_row) >= self.min_token_position
            train, val = train[kept[train]], val[kept[val]]
        if len(train) == 0:
            raise ValueError(
                f"val_fraction={self.val_fraction}, min_token_position={self.min_token_position} leave no "
                f"training rows in {self.path}"
            )
        activations = self.sharded(tensor_name(self.site, self.layer))
        dtype = self.index["dtype"]
        self.train_dataset = ActivationRows(activations, positions, sample_index, train, dtype, harvest_starts)
        self.val_dataset = ActivationRows(activations, positions, sample_index, val, dtype, harvest_starts)

    def train_dataloader(self) -> DataLoader:
        return ResumableDataLoader(
            self.train_dataset,
            batch_size=self.batch_size,
            sampler=EpochSeededSampler(len(self.train_dataset), self.seed),
            collate_fn=as_batch,
            num_workers=self.num_workers,
        )

    def val_dataloader(self) -> DataLoader:
        return DataLoader(
            self.val_dataset,
            batch_size=self.batch_size,
            shuffle=False,
            collate_fn=as_batch,
            num_workers=self.num_workers,
        )
