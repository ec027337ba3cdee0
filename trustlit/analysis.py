"""Estimators that do not train, run as a thin LightningModule under ``trustlit test``.

Many methods measure instead of fitting: an intrinsic-dimension estimate of a layer, Shapley
values of a model's prediction, a membership-inference audit, private statistics. They still
compose with a stock ``Trainer`` (devices, loggers, SLURM, recipes) by following one pattern, the
one torchgeo's tasks use for evaluation:

- ``test_step`` hands each batch to :meth:`AnalysisModule.update`, which accumulates what the
  estimator needs (sums, samples, model outputs) on the module;
- ``on_test_epoch_end`` calls :meth:`AnalysisModule.compute` once, over everything seen, logs
  every scalar result as ``test/<name>`` and writes all results (scalars, lists, tables) to
  ``<trainer.default_root_dir>/<results_file>`` atomically.

Under DDP each rank accumulates its shard; :func:`gather_rows` (:meth:`AnalysisModule.gather`) concatenates a tensor
over the ranks for ``compute``. ``trustlit fit`` on an analysis module is refused with one line.
A subclass implements ``update`` and ``compute`` (and ``reset`` when it keeps state other than
tensors registered as buffers); the estimator itself stays a pure function that ``compute`` calls.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any

import lightning as L
import torch

from trustlit.paths import write_json_atomic


def _plain(value: Any) -> Any:
    """JSON-ready data from tensors, numbers, lists and dicts."""
    if isinstance(value, torch.Tensor):
        return value.item() if value.numel() == 1 else value.detach().cpu().tolist()
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


def scalar_results(results: dict[str, Any]) -> dict[str, float]:
    """The entries of ``results`` that are single finite-or-not numbers (logged as metrics)."""
    scalars = {}
    for name, value in results.items():
        one_number = isinstance(value, torch.Tensor) and value.numel() == 1
        if one_number or (isinstance(value, int | float) and not isinstance(value, bool)):
            scalars[name] = float(value)
    return scalars


def gather_rows(module: L.LightningModule, tensor: torch.Tensor) -> torch.Tensor:
    """``tensor`` [N_rank, ...] concatenated over the ranks of ``module``'s trainer (itself on one device);
    ranks must agree on the trailing shape. Ranks with different N are padded to the largest and the
    padding dropped. Callbacks gather their rows through the module they are given."""
    if module.trainer.world_size == 1:
        return tensor
    sizes = module.all_gather(torch.tensor(tensor.shape[0], device=module.device))
    largest = int(sizes.max())
    padded = torch.zeros((largest, *tensor.shape[1:]), dtype=tensor.dtype, device=module.device)
    padded[: tensor.shape[0]] = tensor
    gathered = module.all_gather(padded)
    return torch.cat([gathered[rank, : int(size)] for rank, size in enumerate(sizes)])


class AnalysisModule(L.LightningModule, ABC):
    """Base of the estimators that do not train (see the module docstring).

    Args:
        results_file: where :meth:`compute`'s results go, relative to ``trainer.default_root_dir``.
    """

    def __init__(self, results_file: str = "analysis.json") -> None:
        super().__init__()
        self.results_file = results_file
        self.results: dict[str, Any] = {}

    @abstractmethod
    def update(self, batch: Any) -> None:
        """Accumulate what :meth:`compute` needs from one batch."""

    @abstractmethod
    def compute(self) -> dict[str, Any]:
        """The estimates over every batch seen: name -> number, tensor, list or dict."""

    def reset(self) -> None:
        """Forget what was accumulated (called before each test epoch)."""

    def gather(self, tensor: torch.Tensor) -> torch.Tensor:
        """:func:`gather_rows` of ``tensor`` over this module's ranks."""
        return gather_rows(self, tensor)

    def on_test_epoch_start(self) -> None:
        self.reset()

    def test_step(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
        self.update(batch)

    def on_test_epoch_end(self) -> None:
        self.results = self.compute()
        for name, value in scalar_results(self.results).items():
            if not math.isnan(value):
                self.log(f"test/{name}", value, sync_dist=False, rank_zero_only=True)
        if self.trainer.is_global_zero:
            root = Path(self.trainer.default_root_dir)
            write_json_atomic(root / self.results_file, {"method": type(self).__name__, **_plain(self.results)})

    def training_step(self, batch: Any, batch_idx: int) -> None:
        raise RuntimeError(f"{type(self).__name__} is an analysis module, it does not train: run `trustlit test`")

    def configure_optimizers(self) -> None:
        return None
