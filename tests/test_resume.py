"""Exact mid-epoch resume: a run resumed from a checkpoint taken inside an epoch trains like an
uninterrupted one (ResumableDataLoader's state travels in the checkpoint)."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import lightning as L
import pytest
import torch
from helpers import QUICKSTART, TINY
from lightning.fabric.plugins.environments import SLURMEnvironment
from lightning.fabric.utilities.distributed import DistributedSamplerWrapper
from lightning.pytorch.utilities.data import _update_dataloader
from torch.utils.data import DataLoader

from trustlit.cli import run_cli
from trustlit.data.samplers import EpochSeededSampler, ResumableDataLoader
from trustlit.llm.module import lr_multiplier


def loader(num_samples: int = 10, batch_size: int = 3, num_workers: int = 0) -> ResumableDataLoader:
    sampler = EpochSeededSampler(num_samples, seed=1)
    data = list(range(num_samples))
    return ResumableDataLoader(data, batch_size=batch_size, sampler=sampler, num_workers=num_workers)


def batches(dl: DataLoader, epoch: int, limit: int | None = None) -> list[list[int]]:
    dl.sampler.set_epoch(epoch)
    out = []
    for batch in dl:
        out.append(batch.tolist())
        if len(out) == limit:
            break
    return out


@pytest.mark.parametrize("num_workers", [0, 2])
def test_a_restored_loader_continues_the_interrupted_epoch(num_workers):
    full = batches(loader(), epoch=3)
    interrupted = loader(num_workers=num_workers)
    assert batches(interrupted, epoch=3, limit=2) == full[:2]
    state = interrupted.state_dict()
    assert state == {"batches_yielded": 2}, "worker prefetching must not count"
    resumed = loader(num_workers=num_workers)
    resumed.load_state_dict(state)
    assert batches(resumed, epoch=3) == full[2:]
    assert batches(resumed, epoch=4) == batches(loader(), epoch=4), "only the first pass skips"


def test_the_epoch_set_after_iter_decides_the_order_even_with_workers():
    # a resumed fit calls iter() on the loader before set_epoch: workers must not prefetch before it
    dl = loader(num_workers=2)
    iterator = iter(dl)
    dl.sampler.set_epoch(5)
    assert [b.tolist() for b in iterator] == batches(loader(), epoch=5)


def test_a_checkpoint_after_the_last_batch_resumes_at_the_next_epoch():
    finished = loader()
    batches(finished, epoch=0, limit=4)  # all 4 batches, the pass not yet closed, as at on_train_batch_end
    resumed = loader()
    resumed.load_state_dict(finished.state_dict())
    assert batches(resumed, epoch=1) == batches(loader(), epoch=1)


def on_rank(original: ResumableDataLoader, rank: int) -> DataLoader:
    """The loader Lightning builds for ``rank`` of 2 under DDP (use_distributed_sampler=True)."""
    sampler = DistributedSamplerWrapper(original.sampler, num_replicas=2, rank=rank, shuffle=False)
    return _update_dataloader(original, sampler)


def test_lightning_keeps_the_loader_resumable_when_it_adds_a_distributed_sampler():
    original = loader(num_samples=20, batch_size=2)
    ranks = [on_rank(original, r) for r in (0, 1)]
    assert all(isinstance(dl, ResumableDataLoader) for dl in ranks)
    full = [batches(dl, epoch=2) for dl in ranks]
    assert not {i for b in full[0] for i in b} & {i for b in full[1] for i in b}, "ranks see disjoint shards"
    for rank, dl in enumerate(ranks):
        batches(dl, epoch=2, limit=3)
        again = on_rank(original, rank)
        again.load_state_dict(dl.state_dict())
        assert batches(again, epoch=2) == full[rank][3:]


def fit(root: Path, *extra: str):
    args = [
        "fit",
        *("-c", str(QUICKSTART)),
        *TINY,
        f"--trainer.default_root_dir={root}",
        "--trainer.logger=false",
        "--trainer.limit_val_batches=0",
        "--trainer.max_steps=10",
        "--model.init_args.warmup_steps=2",  # the cosine decay reads the run's length from step 3 on
        "--checkpoint.every_n_train_steps=6",  # step 6: 2 batches into epoch 1 (4 batches an epoch)
        "--checkpoint.save_top_k=-1",
        *extra,
    ]
    return run_cli(args)


def weights(cli) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in cli.model.state_dict().items()}


def max_abs_diff(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    assert a.keys() == b.keys()
    return max((a[k] - b[k]).abs().max().item() for k in a)


@pytest.mark.slow
def test_resume_from_a_mid_epoch_checkpoint_equals_an_uninterrupted_run(tmp_path):
    uninterrupted = fit(tmp_path / "full")
    checkpoint = tmp_path / "full" / "checkpoints" / "epoch=1-step=6.ckpt"
    state = torch.load(checkpoint, weights_only=False)
    assert state["global_step"] == 6
    loader_state = state["loops"]["fit_loop"]["state_dict"]["combined_loader"]
    assert loader_state == [{"batches_yielded": 2}], "the checkpoint is mid-epoch and carries the loader position"
    lr = state["lr_schedulers"][0]["_last_lr"][0]
    assert lr == pytest.approx(3e-3 * lr_multiplier(6, 2, 10, "cosine")), "the schedule knows the run's length"

    resumed = fit(tmp_path / "resumed", f"--ckpt_path={checkpoint}")
    assert resumed.trainer.global_step == 10
    assert max_abs_diff(weights(resumed), weights(uninterrupted)) <= 1e-6

    # the control, which shows the comparison can fail: without the loader position the resumed
    # run replays epoch 1 from its first batch
    fit_loop_state = state["loops"]["fit_loop"]["state_dict"]
    del fit_loop_state["combined_loader"]
    torch.save(state, tmp_path / "no_loader_state.ckpt")
    replayed = fit(tmp_path / "replayed", f"--ckpt_path={tmp_path / 'no_loader_state.ckpt'}")
    assert max_abs_diff(weights(replayed), weights(uninterrupted)) > 1e-4


class SignalAtStep(L.Callback):
    """Sends this process SIGUSR1 at the start of a training step, as SLURM does before a time limit."""

    def __init__(self, step: int) -> None:
        self.step = step

    def on_train_batch_start(self, trainer: L.Trainer, *args: object) -> None:
        if trainer.global_step == self.step:
            os.kill(os.getpid(), signal.SIGUSR1)


@pytest.mark.slow
def test_a_slurm_requeue_signal_checkpoints_at_the_end_of_the_running_batch(tmp_path, monkeypatch):
    slurm = {"SLURM_NTASKS": "1", "SLURM_JOB_NAME": "trustlit-test", "SLURM_JOB_ID": "424242", "SLURM_PROCID": "0"}
    slurm |= {"SLURM_LOCALID": "0", "SLURM_NODEID": "0", "SLURM_NODELIST": "localhost"}
    for name, value in slurm.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("SLURM_CONF", raising=False)  # scontrol requeue of the made-up job then fails harmlessly
    previous = signal.signal(signal.SIGUSR1, signal.SIG_IGN)  # never the default action (exit) if unhandled
    try:
        signal_at = '{"class_path": "test_resume.SignalAtStep", "init_args": {"step": 6}}'
        interrupted = fit(tmp_path / "interrupted", f"--trainer.callbacks+={signal_at}")
    finally:
        signal.signal(signal.SIGUSR1, previous)
    assert isinstance(interrupted.trainer._accelerator_connector.cluster_environment, SLURMEnvironment)
    hpc = torch.load(tmp_path / "interrupted" / "hpc_ckpt_1.ckpt", weights_only=False)
    # the signal came at the start of step 6 (batch 3 of epoch 1); the checkpoint waited for its end
    assert hpc["global_step"] == 7
    assert hpc["loops"]["fit_loop"]["state_dict"]["combined_loader"] == [{"batches_yielded": 3}]
    uninterrupted = fit(tmp_path / "full")
    assert max_abs_diff(weights(interrupted), weights(uninterrupted)) == 0.0, "the signal must not disturb training"
    resumed = fit(tmp_path / "resumed", f"--ckpt_path={tmp_path / 'interrupted' / 'hpc_ckpt_1.ckpt'}")
    assert max_abs_diff(weights(resumed), weights(uninterrupted)) <= 1e-6
