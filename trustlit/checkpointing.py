"""Checkpoints a run can trust: written atomically, always final, owned by one run, checked on load.

- :class:`AtomicCheckpointIO` writes each checkpoint to a temporary file in its own directory and
  renames it into place (``os.replace``): a kill during a save leaves the previous ``last.ckpt``
  whole. Lightning's writer stages in ``$TMPDIR`` (or memory) and moves across filesystems, which is
  not atomic on cluster storage.
- :class:`TrustlitCheckpoint` is ``ModelCheckpoint`` whose ``last.ckpt`` is the final state of
  every fit (Lightning's may stop at the last multiple of ``every_n_train_steps``), and which
  records the model class and the log directory in each checkpoint.
- :class:`CheckpointDirLock` keeps a second run from writing into the same checkpoint directory.
- :func:`resolve_checkpoint` finds ``--ckpt_path last`` and refuses unreadable checkpoints and
  checkpoints of another model class.
"""

from __future__ import annotations

import importlib
import json
import os
import socket
import warnings
from pathlib import Path
from typing import Any

import lightning as L
import torch
from fsspec.implementations.local import LocalFileSystem
from lightning.fabric.utilities.cloud_io import get_filesystem
from lightning.fabric.utilities.types import _PATH
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.plugins.io import TorchCheckpointIO

from trustlit.errors import CheckpointError, RunLockedError
from trustlit.paths import TEMP_SUFFIX, atomic_path

MODEL_CLASS_KEY = "trustlit_model_class"
LOG_DIR_KEY = "trustlit_log_dir"
LOCK_NAME = ".trustlit.lock"


class AtomicCheckpointIO(TorchCheckpointIO):
    """``torch.save`` into a temporary file beside the target, fsync, rename (:func:`~trustlit.paths.atomic_path`)."""

    def save_checkpoint(self, checkpoint: dict[str, Any], path: _PATH, storage_options: Any | None = None) -> None:
        if storage_options is not None or not isinstance(get_filesystem(path), LocalFileSystem):
            super().save_checkpoint(checkpoint, path, storage_options)  # object stores write whole objects
            return
        with atomic_path(Path(path)) as temporary, open(temporary, "wb") as handle:
            torch.save(checkpoint, handle)
            handle.flush()
            os.fsync(handle.fileno())  # on disk before the rename makes it the checkpoint


class TrustlitCheckpoint(ModelCheckpoint):
    """``ModelCheckpoint`` whose ``last.ckpt`` holds the final state of the fit, whatever the schedule."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._last_step_saved = -1

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        # the run's own lock is no sign of an older run's checkpoints
        only_lock = self.dirpath is not None and [p.name for p in Path(self.dirpath).glob("*")] == [LOCK_NAME]
        with warnings.catch_warnings():
            if only_lock:
                warnings.filterwarnings("ignore", message="Checkpoint directory .* exists and is not empty")
            super().setup(trainer, pl_module, stage)

    def _save_last_checkpoint(self, trainer: L.Trainer, monitor_candidates: dict[str, torch.Tensor]) -> None:
        super()._save_last_checkpoint(trainer, monitor_candidates)
        if self.save_last:
            self._last_step_saved = trainer.global_step

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self.save_last and not trainer.fast_dev_run and self._last_step_saved != trainer.global_step:
            self._save_last_checkpoint(trainer, self._monitor_candidates(trainer))

    def on_save_checkpoint(self, trainer: L.Trainer, pl_module: L.LightningModule, checkpoint: dict[str, Any]) -> None:
        # Lightning stores the class only as configured (an alias, or nothing outside LightningCLI)
        checkpoint[MODEL_CLASS_KEY] = class_name(type(pl_module))
        checkpoint[LOG_DIR_KEY] = getattr(trainer.logger, "log_dir", None) if trainer.logger else None


# ---------------------------------------------------------------------------------------- the lock


def _owner() -> dict[str, Any]:
    return {"pid": os.getpid(), "host": socket.gethostname(), "slurm_job_id": os.environ.get("SLURM_JOB_ID")}


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _is_stale(holder: dict[str, Any]) -> bool:
    """A holder that cannot be writing any more: a dead process on this host, or this SLURM job
    before its requeue (the job restarts, perhaps on another node, with the same id)."""
    me = _owner()
    if me["slurm_job_id"] is not None and holder.get("slurm_job_id") == me["slurm_job_id"]:
        return True
    return holder.get("host") == me["host"] and not _pid_alive(int(holder.get("pid", -1)))


class CheckpointDirLock(L.Callback):
    """Holds ``<dirpath>/.trustlit.lock`` (pid, host, SLURM job id) from the start of fit to its end.

    Rank 0 takes the lock and tells the other ranks whether it got it, so every rank stops together.
    Taking it over from a stale holder also removes the temporary files its kill left behind.
    """

    def __init__(self, dirpath: str | Path) -> None:
        self.path = Path(dirpath) / LOCK_NAME
        self._held = False

    def acquire(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        for _ in range(2):
            try:
                fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            except FileExistsError:
                holder = self._holder()
                if not _is_stale(holder):
                    raise RunLockedError(
                        f"{self.path.parent} is in use by pid {holder.get('pid')} on {holder.get('host')}: two runs "
                        "would overwrite each other's checkpoints; give this run its own --trainer.default_root_dir, "
                        f"or delete {self.path} if that run is gone"
                    ) from None
                self.path.unlink(missing_ok=True)
                continue
            with os.fdopen(fd, "w") as handle:
                json.dump(_owner(), handle)
            self._held = True
            for orphan in self.path.parent.glob(f".*{TEMP_SUFFIX}"):
                orphan.unlink(missing_ok=True)
            return
        raise RunLockedError(f"could not take {self.path}: another run took it at the same time")

    def _holder(self) -> dict[str, Any]:
        try:
            return json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}  # half-written or unreadable: no live owner can be shown, so it is stale

    def release(self) -> None:
        if self._held:
            self.path.unlink(missing_ok=True)
            self._held = False

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        if stage != "fit":
            return
        refusal = None
        if trainer.is_global_zero:
            try:
                self.acquire()
            except RunLockedError as error:
                refusal = str(error)
        refusal = trainer.strategy.broadcast(refusal, src=0)
        if refusal:
            raise RunLockedError(refusal)

    def teardown(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        self.release()

    def on_exception(self, trainer: L.Trainer, pl_module: L.LightningModule, exception: BaseException) -> None:
        self.release()


# ---------------------------------------------------------------------------------------- loading


def class_name(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def _canonical(class_path: str) -> str:
    """``module.Class`` where the class is defined, for a path through a re-exporting package."""
    module, _, name = class_path.rpartition(".")
    try:
        return class_name(getattr(importlib.import_module(module), name))
    except (ImportError, AttributeError, ValueError):
        return class_path


def find_last(directory: Path) -> Path | None:
    """The newest ``last*.ckpt`` in ``directory`` (``last-v1.ckpt`` when an older run left ``last.ckpt``)."""
    candidates = sorted(directory.glob("last*.ckpt"), key=lambda p: p.stat().st_mtime)
    return candidates[-1] if candidates else None


SHARDED_METADATA = "meta.pt"  # what Lightning writes beside the shards of a distributed checkpoint directory


def read_checkpoint(path: Path) -> dict[str, Any]:
    """The checkpoint's contents, memory-mapped (the weights are read when used); a missing or bad file names its path.

    A sharded checkpoint (a directory, written under FSDP2) is read from its metadata file, which
    holds everything but the model and optimiser shards.
    """
    file = path / SHARDED_METADATA if path.is_dir() else path
    if not file.is_file():
        raise FileNotFoundError(f"checkpoint not found: {path}")
    try:
        return torch.load(file, map_location="cpu", mmap=not path.is_dir(), weights_only=True)
    except Exception as error:  # torch raises RuntimeError, UnpicklingError, EOFError... for a bad file
        raise CheckpointError(f"{path}: not a readable checkpoint, truncated or corrupt ({error})") from error


def save_weights_checkpoint(module: L.LightningModule, path: Path) -> None:
    """Write what ``Trainer.save_checkpoint(path, weights_only=True)`` writes of a module's own state, for a module
    built outside a Trainer (one rebuilt from saved weights): its weights, its hyperparameters and the Lightning
    version, which ``load_from_checkpoint`` and the causal-LM loader read; atomically."""
    checkpoint: dict[str, Any] = {"pytorch-lightning_version": L.__version__, "state_dict": module.state_dict()}
    if module.hparams:
        if hasattr(module, "_hparams_name"):
            checkpoint[module.CHECKPOINT_HYPER_PARAMS_NAME] = module._hparams_name
        checkpoint[module.CHECKPOINT_HYPER_PARAMS_KEY] = dict(module.hparams)
    module.on_save_checkpoint(checkpoint)
    with atomic_path(path) as temporary:
        torch.save(checkpoint, temporary)


def check_model_class(checkpoint: dict[str, Any], configured: str, path: Path, hint: str) -> None:
    """Refuses a checkpoint written by another model class than ``configured`` (a class path)."""
    saved = checkpoint.get(MODEL_CLASS_KEY) or checkpoint.get("hyper_parameters", {}).get("_class_path")
    if saved is None or _canonical(saved) == _canonical(configured):
        return
    raise CheckpointError(
        f"{path} was written by {_canonical(saved)}, but the model is {_canonical(configured)}: "
        f"--ckpt_path resumes the same class{hint}"
    )


def resolve_checkpoint(ckpt_path: str | None, directory: Path, subcommand: str) -> Path | None:
    """The checkpoint file ``ckpt_path`` names (``last``: the newest in ``directory``), or None when
    there is none to load. ``fit --ckpt_path last`` before any checkpoint starts from scratch (so a
    job can always be launched with it); ``validate/test/predict`` refuse, as they would evaluate an
    untrained model."""
    if ckpt_path is None or ckpt_path in ("best", "hpc") or "://" in ckpt_path:
        return None  # Lightning resolves these from the trainer's state
    if ckpt_path != "last":
        return Path(ckpt_path).expanduser()
    found = find_last(directory) if directory.is_dir() else None
    if found is None and subcommand != "fit":
        raise CheckpointError(
            f"--ckpt_path last: no last*.ckpt in {directory}; train first (trustlit fit with the same "
            "--trainer.default_root_dir), or pass --ckpt_path PATH"
        )
    return found
