"""A test-only callback that reports, per rank, what the SLURM tests check.

Jobs load it with ``--trainer.callbacks+=slurm_probe.RankProbe`` (``tests/slurm`` on PYTHONPATH).
Each rank appends JSON lines to ``<default_root_dir>/probe/rank<R>.jsonl``: the cluster
environment and ranks Lightning chose, the W&B run id (rank 0), the step and sample indices of each batch, and a
digest of the final parameters. ``delay`` slows each step down so that a test can signal the job
mid-training; it sleeps before the batch, so the weights do not depend on it.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path
from typing import Any

import lightning as L


class RankProbe(L.Callback):
    def __init__(self, delay: float = 0.0) -> None:
        self.delay = delay

    def _write(self, trainer: L.Trainer, event: str, **fields: Any) -> None:
        path = Path(trainer.default_root_dir) / "probe" / f"rank{trainer.global_rank}.jsonl"
        path.parent.mkdir(parents=True, exist_ok=True)
        record = {"event": event, "restart": int(os.environ.get("SLURM_RESTART_COUNT", 0)), **fields}
        with path.open("a", encoding="utf-8") as file:
            file.write(json.dumps(record) + "\n")

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        logger = trainer.logger
        wandb_id = logger.experiment.id if trainer.is_global_zero and type(logger).__name__ == "WandbLogger" else None
        self._write(
            trainer,
            "train_start",
            cluster_environment=type(trainer.strategy.cluster_environment).__name__,
            global_rank=trainer.global_rank,
            world_size=trainer.world_size,
            global_step=trainer.global_step,
            wandb_id=wandb_id,
            master_port=os.environ.get("MASTER_PORT"),
        )

    def on_train_batch_start(
        self, trainer: L.Trainer, pl_module: L.LightningModule, batch: Any, batch_idx: int
    ) -> None:
        indices = batch.get("index") if isinstance(batch, dict) else None
        self._write(
            trainer,
            "batch",
            global_step=trainer.global_step,
            epoch=trainer.current_epoch,
            batch_idx=batch_idx,
            indices=indices.tolist() if hasattr(indices, "tolist") else indices,
        )
        time.sleep(self.delay)

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        digest = hashlib.sha256()
        for name, tensor in sorted(pl_module.state_dict().items()):
            digest.update(name.encode())
            digest.update(tensor.detach().cpu().contiguous().numpy().tobytes())
        self._write(trainer, "train_end", global_step=trainer.global_step, params_sha256=digest.hexdigest())
