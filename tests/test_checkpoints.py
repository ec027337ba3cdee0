"""Checkpoints a run can trust: found or refused, final, owned by one run, written atomically, and
placed (with the logs) by ``trainer.default_root_dir`` alone. Every run goes through ``trustlit.cli.main``."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import lightning as L
import pytest
import torch
from helpers import QUICKSTART, REPO_ROOT, TINY

from trustlit.checkpointing import LOCK_NAME, AtomicCheckpointIO, CheckpointDirLock
from trustlit.cli import main
from trustlit.errors import RunLockedError

SIMNPO = REPO_ROOT / "recipes" / "unlearning" / "simnpo_tofu.yaml"
TINY_NO_VALIDATION = [*TINY, "--trainer.limit_val_batches=0"]


def quickstart(command: str, root: Path, *extra: str) -> list[str]:
    """The quickstart at tiny size; only ``trainer.default_root_dir`` says where it writes."""
    return [command, "-c", str(QUICKSTART), *TINY_NO_VALIDATION, f"--trainer.default_root_dir={root}", *extra]


def files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.is_file()) if root.exists() else []


def fails(capsys, args: list[str], status: int = 1) -> str:
    """The one-line error of ``trustlit ARGS``, checked to be one line with the given exit status."""
    with pytest.raises(SystemExit) as exit_info:
        main(args)
    assert exit_info.value.code == status
    err = capsys.readouterr().err.strip().splitlines()
    # only the last line: pytest's capture closes streams that Lightning's log handler still holds
    assert err[-1].startswith("trustlit: error: ") and not any(e.startswith("trustlit: ") for e in err[:-1]), err
    return err[-1]


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    """A quickstart run of 3 steps, checkpointed every 2: its last.ckpt must still hold step 3."""
    root = tmp_path_factory.mktemp("trained")
    main(quickstart("fit", root, "--trainer.max_steps=3", "--checkpoint.every_n_train_steps=2"))
    return root


@pytest.mark.parametrize("command", ["test", "validate", "predict"])
def test_evaluating_last_without_a_checkpoint_is_refused_and_writes_nothing(tmp_path, capsys, command):
    line = fails(capsys, quickstart(command, tmp_path, "--ckpt_path=last"))
    assert f"no last*.ckpt in {tmp_path / 'checkpoints'}" in line
    assert files(tmp_path) == []


def test_last_checkpoint_is_the_final_state_whatever_the_schedule(trained):
    last = torch.load(trained / "checkpoints" / "last.ckpt", weights_only=True)
    assert last["global_step"] == 3, "Lightning alone leaves last.ckpt at step 2"
    assert torch.load(trained / "checkpoints" / "epoch=0-step=2.ckpt", weights_only=True)["global_step"] == 2
    assert last["trustlit_model_class"] == "trustlit.finetune.CausalLMFineTuning"
    assert not (trained / "checkpoints" / LOCK_NAME).exists(), "the lock is released at the end of fit"


def test_logs_follow_the_root_and_a_resumed_fit_continues_its_log_version(trained, tmp_path, capsys):
    assert {p.relative_to(trained).as_posix() for p in files(trained / "logs")} >= {
        "logs/version_0/config.yaml",
        "logs/version_0/hparams.yaml",
    }, "the recipe's save_dir (runs/quickstart/...) followed --trainer.default_root_dir"
    root = tmp_path / "resumed"
    main(quickstart("fit", root, "--trainer.max_steps=2", "--trainer.log_every_n_steps=1"))
    main(quickstart("fit", root, "--trainer.max_steps=4", "--trainer.log_every_n_steps=1", "--ckpt_path=last"))
    assert sorted(p.name for p in (root / "logs").iterdir()) == ["version_0"]
    steps = [line.split(",") for line in (root / "logs" / "version_0" / "metrics.csv").read_text().splitlines()]
    step_column = steps[0].index("step")
    assert [int(row[step_column]) for row in steps[1:]] == [0, 1, 2, 3], "both runs' rows, in one file"
    explicit = tmp_path / "explicit_logs"
    main(quickstart("fit", root / "other", "--trainer.max_steps=1", f"--trainer.logger.init_args.save_dir={explicit}"))
    assert (explicit / "logs" / "version_0" / "config.yaml").is_file(), "an explicit save_dir is kept"


def test_a_checkpoint_of_another_model_class_is_refused_with_both_names(trained, tmp_path, capsys):
    last = trained / "checkpoints" / "last.ckpt"
    line = fails(capsys, ["fit", "-c", str(SIMNPO), f"--trainer.default_root_dir={tmp_path}", f"--ckpt_path={last}"])
    assert "trustlit.finetune.CausalLMFineTuning" in line and "trustlit.unlearning.simnpo.SimNPO" in line
    assert f"--model.init_args.lm.name_or_path={last}" in line
    assert files(tmp_path) == []


@pytest.mark.parametrize("damage", ["truncated", "garbage"])
def test_a_corrupt_checkpoint_is_named(trained, tmp_path, capsys, damage):
    bad = tmp_path / "bad.ckpt"
    data = (trained / "checkpoints" / "last.ckpt").read_bytes()
    bad.write_bytes(data[: len(data) // 2] if damage == "truncated" else b"not a checkpoint")
    line = fails(capsys, quickstart("test", tmp_path / "run", f"--ckpt_path={bad}"))
    assert f"{bad}: not a readable checkpoint" in line
    assert files(tmp_path / "run") == []


def test_a_second_run_into_the_same_directory_is_refused(trained, capsys):
    checkpoints = trained / "checkpoints"
    before = {p: p.read_bytes() for p in files(checkpoints)}
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        lock = {"pid": sleeper.pid, "host": socket.gethostname(), "slurm_job_id": None}
        (checkpoints / LOCK_NAME).write_text(json.dumps(lock))
        line = fails(capsys, quickstart("fit", trained, "--trainer.max_steps=5"))
        assert f"in use by pid {sleeper.pid} on {socket.gethostname()}" in line
        assert {p: p.read_bytes() for p in files(checkpoints) if p.name != LOCK_NAME} == before
        assert (checkpoints / LOCK_NAME).exists(), "the other run's lock stays"
    finally:
        sleeper.kill()
        sleeper.wait()
        (checkpoints / LOCK_NAME).unlink(missing_ok=True)


def test_a_stale_lock_is_taken_over_and_a_requeued_job_takes_its_own(tmp_path, monkeypatch):
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    lock = CheckpointDirLock(tmp_path)
    lock.path.write_text(json.dumps({"pid": int(dead.stdout), "host": socket.gethostname()}))
    (tmp_path / ".last.ckpt.x1.tmp").write_bytes(b"half")  # what a kill mid-save left behind
    lock.acquire()
    assert json.loads(lock.path.read_text())["pid"] == os.getpid()
    assert not (tmp_path / ".last.ckpt.x1.tmp").exists()
    lock.release()
    assert not lock.path.exists()
    # a live process on another host: refused; the same SLURM job (requeued there): taken
    lock.path.write_text(json.dumps({"pid": 1, "host": "node-b", "slurm_job_id": "77"}))
    monkeypatch.setenv("SLURM_JOB_ID", "78")
    with pytest.raises(RunLockedError, match="in use by pid 1 on node-b"):
        lock.acquire()
    monkeypatch.setenv("SLURM_JOB_ID", "77")
    lock.acquire()
    lock.release()


class FailAtFirstBatch(L.Callback):
    def on_train_batch_start(self, *args: object) -> None:
        raise ValueError("failed at the first batch")


def test_the_lock_is_released_when_fit_fails(tmp_path, capsys):
    failing = '{"class_path": "test_checkpoints.FailAtFirstBatch"}'
    line = fails(capsys, quickstart("fit", tmp_path, "--trainer.max_steps=1", f"--trainer.callbacks+={failing}"))
    assert line == "trustlit: error: failed at the first batch"
    assert (tmp_path / "checkpoints").is_dir() and not (tmp_path / "checkpoints" / LOCK_NAME).exists()


def test_a_failed_save_leaves_the_previous_checkpoint_and_no_temporary_file(tmp_path, monkeypatch):
    monkeypatch.setenv("TMPDIR", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    io, last = AtomicCheckpointIO(), tmp_path / "checkpoints" / "last.ckpt"
    io.save_checkpoint({"step": 1, "w": torch.ones(1000)}, last)
    original = last.read_bytes()
    real_save = torch.save

    def killed_midway(obj, handle, *args, **kwargs):
        real_save(obj, handle, *args, **kwargs)
        handle.truncate(100)  # half the bytes are out
        raise KeyboardInterrupt

    monkeypatch.setattr(torch, "save", killed_midway)
    with pytest.raises(KeyboardInterrupt):
        io.save_checkpoint({"step": 2, "w": torch.zeros(1000)}, last)
    assert last.read_bytes() == original
    assert torch.load(last, weights_only=True)["step"] == 1
    assert sorted(p.name for p in last.parent.iterdir()) == ["last.ckpt"]
    assert list((tmp_path / "tmp").iterdir()) == []
