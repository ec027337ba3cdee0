"""Activation harvesting: store a causal LM's activations at chosen layers, sites and token positions.

:class:`HarvestActivations` is a Callback for ``trustlit predict``: for every predict batch it runs
one forward of the module's model (``pl_module.model``) over the batch's right-padded ``input_ids``
with capture hooks (:func:`trustlit.llm.hooks.capture`), stopped right after the deepest harvested
block (no LM head), and stores one row per selected token. The sites of decoder block ``l``:

- ``residual``: the block's output hidden state (the residual stream after block ``l``, SAELens'
  ``resid_post``). For ``l < L - 1`` it equals ``output_hidden_states[l + 1]``; for the last block
  transformers applies the final norm to ``output_hidden_states[L]``, the harvest stores it before.
- ``mlp``: the MLP's output (its down-projection, :func:`~trustlit.llm.anatomy.mlp_down_projection`).
- ``attention``: the self-attention module's output (after its output projection).

Positions (``t`` indexes the right-padded ``input_ids``, so it is the token's position in its sample):

- ``last_prompt``: the last prompt token, the state that predicts the first answer token;
- ``answer``: every answer token (``labels[t] != -100``); the state is the one AT answer token ``t``
  (its input is y_t), which predicts y_{t+1}: the state that predicts y_t is at ``t - 1``;
- ``all``: every real (non-padding) token, prompt and answer.

Format, in ``output_dir`` (default ``<trainer.default_root_dir>/activations``): safetensors shards
``shard_00000.safetensors``, ... (under DDP ``shard_r01_00000.safetensors``, rank in the name), each
holding one ``[rows, D]`` tensor per ``{site}.{layer}`` (:func:`tensor_name`, layers non-negative)
and ``[rows]`` int64 ``sample_index`` (the batch's ``index``), ``token_position`` and
``dataloader_index`` (which predict dataloader: one per split of a QADataModule); and ``index.json``
(:data:`INDEX_KEYS`). Every file goes through a temporary file in the same directory renamed into
place, and ``index.json`` comes last, so a killed run never leaves an index that names missing data.
``docs/methods/activation_harvesting.md`` has the longer notes; :class:`trustlit.data.ActivationDataModule`
reads the result.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from functools import partial
from pathlib import Path
from typing import Any, Literal, get_args

import lightning as L
import torch
from lightning.pytorch.callbacks import Callback
from safetensors.torch import save_file
from torch import nn

from trustlit import __version__
from trustlit.hparams import PositiveInt, check_arguments
from trustlit.llm import hooks
from trustlit.llm.anatomy import decoder_layer, decoder_layers, mlp_down_projection, self_attention
from trustlit.llm.loading import DTYPES
from trustlit.llm.prompts import IGNORE_INDEX
from trustlit.paths import atomic_path, write_json_atomic
from trustlit.strategies import DDP, SINGLE_DEVICE, check_strategy

Site = Literal["residual", "mlp", "attention"]
Positions = Literal["last_prompt", "answer", "all"]
StorageDtype = Literal["float32", "bfloat16", "float16"]
SITES: tuple[str, ...] = get_args(Site)
POSITIONS: tuple[str, ...] = get_args(Positions)
STORAGE_DTYPES: tuple[str, ...] = get_args(StorageDtype)
INDEX_FILE = "index.json"
FORMAT = "trustlit.activations"
FORMAT_VERSION = 1
ROW_KEYS = ("sample_index", "token_position", "dataloader_index")
INDEX_KEYS = (
    "format",
    "format_version",
    "trustlit_version",
    "model",
    "num_layers",
    "layers",
    "sites",
    "positions",
    "dtype",
    "hidden_size",
    "splits",
    "shards",
    "total_rows",
    "num_samples",
)
SUPPORTED_STRATEGIES = (SINGLE_DEVICE, DDP)
log = logging.getLogger(__name__)


def tensor_name(site: str, layer: int) -> str:
    """The name of a site's tensor in a shard: ``residual.15``."""
    return f"{site}.{layer}"


def position_mask(batch: dict[str, Any], positions: str) -> torch.Tensor:
    """``[B, T]`` bool: the tokens harvested from a right-padded batch (see the module docstring)."""
    real = batch["attention_mask"].bool()
    if positions == "all":
        return real
    answer = batch["labels"] != IGNORE_INDEX
    if positions == "answer":
        return answer
    if not answer.any(dim=1).all():
        raise ValueError("positions='last_prompt' needs an answer token in every sample (labels != -100)")
    last_prompt = answer.int().argmax(dim=1) - 1
    return torch.nn.functional.one_hot(last_prompt, real.size(1)).bool()


def site_modules(model: nn.Module, layers: Sequence[int], sites: Sequence[str]) -> dict[str, nn.Module]:
    """``{tensor_name: module}`` whose outputs are the harvested activations."""
    finders = {"residual": lambda block: block, "mlp": mlp_down_projection, "attention": self_attention}
    return {tensor_name(s, layer): finders[s](decoder_layer(model, layer)) for layer in layers for s in sites}


def harvest_batch(
    model: nn.Module, batch: dict[str, Any], layers: Sequence[int], sites: Sequence[str], positions: str
) -> dict[str, torch.Tensor]:
    """The rows of one batch: ``{tensor_name: [rows, D]}`` plus ``sample_index`` and ``token_position``.

    Rows run over samples, then over positions within a sample. ``layers`` are non-negative.
    """
    deepest = max(layers)
    forward = partial(model, input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], use_cache=False)
    modules = site_modules(model, layers, sites)
    # capture is entered before stop_at, so the deepest block's capture hook runs before the stop
    with torch.no_grad(), hooks.capture(modules) as captured, hooks.stop_at(decoder_layer(model, deepest)):
        hooks.run_until_stopped(forward, f"decoder layer {deepest}")
    samples, tokens = position_mask(batch, positions).nonzero(as_tuple=True)
    rows = {name: activation[samples, tokens] for name, activation in captured.items()}
    rows["sample_index"] = batch["index"].to(samples.device)[samples]
    rows["token_position"] = tokens
    return rows


def save_safetensors_atomic(tensors: dict[str, torch.Tensor], path: Path) -> None:
    """Write a safetensors file through :func:`~trustlit.paths.atomic_path`: never half-written."""
    with atomic_path(path) as temporary:
        save_file(tensors, temporary)


class ShardWriter:
    """Buffers rows on the CPU and writes them as shards of exactly ``shard_size`` rows (the last one fewer)."""

    def __init__(self, directory: Path, prefix: str, shard_size: int) -> None:
        self.directory = directory
        self.prefix = prefix
        self.shard_size = shard_size
        self.pending: list[dict[str, torch.Tensor]] = []
        self.pending_rows = 0
        self.shards: list[dict[str, Any]] = []

    def append(self, rows: dict[str, torch.Tensor]) -> None:
        count = len(rows["sample_index"])
        if count == 0:
            return
        self.pending.append(rows)
        self.pending_rows += count
        while self.pending_rows >= self.shard_size:
            self._write(self.shard_size)

    def close(self) -> list[dict[str, Any]]:
        """Write the remaining rows; the shards written, ``[{"file", "rows"}]``."""
        if self.pending_rows:
            self._write(self.pending_rows)
        return self.shards

    def _write(self, count: int) -> None:
        merged = {key: torch.cat([part[key] for part in self.pending]) for key in self.pending[0]}
        self.pending_rows -= count
        self.pending = [{key: value[count:] for key, value in merged.items()}] if self.pending_rows else []
        name = f"{self.prefix}{len(self.shards):05d}.safetensors"
        shard = {key: value[:count].contiguous() for key, value in merged.items()}
        save_safetensors_atomic(shard, self.directory / name)
        self.shards.append({"file": name, "rows": count})


def shard_prefix(rank: int, world_size: int) -> str:
    return "shard_" if world_size == 1 else f"shard_r{rank:02d}_"


def part_file(directory: Path, rank: int) -> Path:
    """Where a rank leaves its list of shards for rank 0 to merge into ``index.json``."""
    return directory / f".part_r{rank:02d}.json"


def remove_previous_harvest(directory: Path) -> None:
    """Remove the index first (so no index ever names half-replaced shards), then old shards and parts."""
    (directory / INDEX_FILE).unlink(missing_ok=True)
    for pattern in ("shard_*.safetensors", ".part_r*.json"):
        for path in directory.glob(pattern):
            path.unlink()


def model_name(pl_module: L.LightningModule, model: nn.Module) -> str | None:
    """The model's ``lm.name_or_path`` (a trustlit causal-LM module), else its config's ``name_or_path``."""
    lm = pl_module.hparams.get("lm") if hasattr(pl_module, "hparams") else None
    if isinstance(lm, dict) and lm.get("name_or_path"):
        return lm["name_or_path"]
    return getattr(getattr(model, "config", None), "name_or_path", None) or None


def _no_prediction(*args: Any, **kwargs: Any) -> None:
    return None


class HarvestActivations(Callback):
    """Write the activations of predict batches to sharded safetensors files and an ``index.json``.

    See the module docstring for the sites, the position convention and the file format.

    Args:
        layers: decoder-block indices, negatives counting from the last.
        sites: any of ``residual``, ``mlp``, ``attention``.
        positions: ``last_prompt``, ``answer`` or ``all``.
        dtype: storage dtype of the activations (``float32``, ``bfloat16``, ``float16``).
        shard_size: rows per shard file; rows are buffered on the CPU until a shard is full.
        output_dir: default ``<trainer.default_root_dir>/activations``; a previous harvest there is replaced.
        generate: also run the module's own ``predict_step`` (greedy answers). Off by default: the
            harvest needs only its forward, and generation costs many forwards per batch, so while
            predicting the module's ``predict_step`` is shadowed by one that returns nothing.

    Strategies: single device and DDP (each rank writes its own shards, rank 0 writes the index
    after a barrier); sharded strategies are refused: the hooks need whole modules.
    """

    def __init__(
        self,
        layers: list[int],
        sites: list[Site] | None = None,
        positions: Positions = "all",
        dtype: StorageDtype = "float32",
        shard_size: PositiveInt = 65536,
        output_dir: str | None = None,
        generate: bool = False,
    ) -> None:
        check_arguments(HarvestActivations.__init__, locals())
        sites = list(sites) if sites is not None else ["residual"]
        if not layers:
            raise ValueError("HarvestActivations: layers is empty, give at least one decoder-layer index")
        if not sites or any(site not in SITES for site in sites):
            raise ValueError(f"HarvestActivations: sites={sites} is invalid, expected a non-empty subset of {SITES}")
        if positions not in POSITIONS:
            raise ValueError(f"HarvestActivations: positions={positions!r} is invalid, expected one of {POSITIONS}")
        if dtype not in STORAGE_DTYPES:
            raise ValueError(f"HarvestActivations: dtype={dtype!r} is invalid, expected one of {STORAGE_DTYPES}")
        self.layers = list(layers)
        self.sites = list(dict.fromkeys(sites))
        self.positions = positions
        self.dtype = dtype
        self.shard_size = int(shard_size)
        self.output_dir = output_dir
        self.generate = generate
        self.resolved_layers: list[int] = []
        self.directory: Path | None = None
        self._writer: ShardWriter | None = None
        self._splits: dict[int, str | None] = {}
        self._num_samples = 0
        self._hidden_size: int | None = None

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        if stage != "predict":
            return
        check_strategy(type(self).__name__, trainer.strategy, SUPPORTED_STRATEGIES, "the hooks need whole modules")
        model = self._model(pl_module)
        num_layers = len(decoder_layers(model))
        for layer in self.layers:
            decoder_layer(model, layer)  # an index out of range names the valid ones
        self.resolved_layers = sorted({layer % num_layers for layer in self.layers})

    @staticmethod
    def _model(pl_module: L.LightningModule) -> nn.Module:
        model = getattr(pl_module, "model", None)
        if not isinstance(model, nn.Module):
            raise TypeError(
                "HarvestActivations needs a LightningModule holding its causal LM in `.model` "
                f"(trustlit.CausalLMModule); {type(pl_module).__name__} has none"
            )
        return model

    def on_predict_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.directory = Path(self.output_dir or Path(trainer.default_root_dir) / "activations")
        if trainer.is_global_zero:
            self.directory.mkdir(parents=True, exist_ok=True)
            if (self.directory / INDEX_FILE).exists():
                log.warning("HarvestActivations: replacing the harvest in %s", self.directory)
            remove_previous_harvest(self.directory)
        trainer.strategy.barrier("harvest_start")
        prefix = shard_prefix(trainer.global_rank, trainer.world_size)
        self._writer = ShardWriter(self.directory, prefix, self.shard_size)
        self._splits, self._num_samples, self._hidden_size = {}, 0, None
        if not self.generate:
            pl_module.predict_step = _no_prediction

    def on_predict_batch_start(
        self, trainer: L.Trainer, pl_module: L.LightningModule, batch: Any, batch_idx: int, dataloader_idx: int = 0
    ) -> None:
        rows = harvest_batch(self._model(pl_module), batch, self.resolved_layers, self.sites, self.positions)
        storage = DTYPES[self.dtype]
        stored = {key: value.to("cpu", storage if key not in ROW_KEYS else torch.int64) for key, value in rows.items()}
        stored["dataloader_index"] = torch.full_like(stored["sample_index"], dataloader_idx)
        self._hidden_size = stored[tensor_name(self.sites[0], self.resolved_layers[0])].size(-1)
        split = batch.get("split")
        self._splits[dataloader_idx] = split if isinstance(split, str) else None
        self._num_samples += len(batch["index"])
        self._writer.append(stored)

    def on_predict_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._restore(pl_module)
        part = {
            "shards": self._writer.close(),
            "num_samples": self._num_samples,
            "splits": {str(k): v for k, v in self._splits.items()},
            "hidden_size": self._hidden_size,
        }
        write_json_atomic(part_file(self.directory, trainer.global_rank), part)
        trainer.strategy.barrier("harvest_end")
        if trainer.is_global_zero:
            self._write_index(trainer.world_size, self._model(pl_module), pl_module)

    def on_exception(self, trainer: L.Trainer, pl_module: L.LightningModule, exception: BaseException) -> None:
        self._restore(pl_module)

    @staticmethod
    def _restore(pl_module: L.LightningModule) -> None:
        if pl_module.__dict__.get("predict_step") is _no_prediction:
            del pl_module.predict_step

    def _write_index(self, world_size: int, model: nn.Module, pl_module: L.LightningModule) -> None:
        parts = [json.loads(part_file(self.directory, rank).read_text()) for rank in range(world_size)]
        shards = [shard for part in parts for shard in part["shards"]]
        splits = {int(k): v for part in parts for k, v in part["splits"].items()}
        index = {
            "format": FORMAT,
            "format_version": FORMAT_VERSION,
            "trustlit_version": __version__,
            "model": model_name(pl_module, model),
            "num_layers": len(decoder_layers(model)),
            "layers": self.resolved_layers,
            "sites": self.sites,
            "positions": self.positions,
            "dtype": self.dtype,
            "hidden_size": next((p["hidden_size"] for p in parts if p["hidden_size"] is not None), None),
            "splits": [splits.get(i) for i in range(max(splits, default=-1) + 1)],
            "shards": shards,
            "total_rows": sum(shard["rows"] for shard in shards),
            "num_samples": sum(part["num_samples"] for part in parts),
        }
        write_json_atomic(self.directory / INDEX_FILE, index)
        for rank in range(world_size):
            part_file(self.directory, rank).unlink()
