"""``trustlit slurm submit`` on a real SLURM cluster (``tests/slurm/cluster.sh up``).

A tiny quickstart fine-tune runs as a 2-task DDP job over gloo on one node, once straight through
and once interrupted by ``scancel --signal=USR1`` mid-epoch: Lightning writes ``hpc_ckpt_1.ckpt``
and requeues the job, SLURM restarts it, and it resumes. :mod:`slurm_probe` reports from inside
the job (``tests/slurm`` is on the job's PYTHONPATH).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
from helpers import QUICKSTART, REPO_ROOT, TINY

from trustlit.slurm import main

pytestmark = pytest.mark.slurm

HERE = Path(__file__).resolve().parent
WANDB = REPO_ROOT / "configs" / "logger" / "wandb.yaml"
MAX_STEPS = 12  # 6 epochs of 2 batches per rank (54 facts, batch 16, 2 ranks)
SIGNAL_AT_STEP = 5  # the second batch of epoch 2: mid-epoch
JOB_ARGS = [
    *TINY,  # a fit of a few epochs takes seconds
    "--trainer.devices=2",
    "--trainer.strategy=ddp",
    f"--trainer.max_steps={MAX_STEPS}",
    "--trainer.limit_val_batches=0",
    "--model.init_args.lr_schedule=constant",
    "-c",
    str(WANDB),
    '--trainer.callbacks+={"class_path": "slurm_probe.RankProbe", "init_args": {"delay": 0.5}}',
]
FINAL_STATES = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE")


@dataclass
class Job:
    id: str
    root: Path
    slurm_conf: str

    @property
    def run_dir(self) -> Path:
        return self.root / self.id

    @property
    def log(self) -> str:
        path = self.root / f"tiny-{self.id}.out"
        return path.read_text(errors="replace") if path.exists() else "(no log yet)"

    def field(self, name: str) -> str:
        """A field of ``scontrol show job`` (sacct needs accounting, which the test cluster has not)."""
        result = slurm(self.slurm_conf, "scontrol", "-o", "show", "job", self.id)
        fields = dict(item.split("=", 1) for item in result.stdout.split() if "=" in item)
        return fields.get(name, "")

    def probe(self, rank: int) -> list[dict]:
        path = self.run_dir / "probe" / f"rank{rank}.jsonl"
        return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []

    def events(self, rank: int, event: str) -> list[dict]:
        return [record for record in self.probe(rank) if record["event"] == event]

    def wait(self, until, what: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if until():
                return
            state = self.field("JobState")
            if state in FINAL_STATES and state != "COMPLETED":
                pytest.fail(f"job {self.id} ended {state} while waiting for {what}; log:\n{self.log[-4000:]}")
            time.sleep(0.1)
        pytest.fail(
            f"job {self.id}: no {what} after {timeout:.0f} s (state {self.field('JobState')}):\n{self.log[-4000:]}"
        )

    def wait_done(self, timeout: float) -> None:
        self.wait(lambda: self.field("JobState") == "COMPLETED", "completion", timeout)


def slurm(slurm_conf: str, *command: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    """A SLURM client command on the test cluster; fails the test when the client itself fails."""
    env = {**os.environ, "SLURM_CONF": slurm_conf}
    result = subprocess.run(command, input=stdin, env=env, capture_output=True, text=True, timeout=60)
    if result.returncode != 0 and command[:2] != ("sbatch", "--test-only"):
        pytest.fail(f"{' '.join(command)} failed ({result.returncode}): {result.stderr.strip()}")
    return result


@contextlib.contextmanager
def job_environment(slurm_conf: str, workdir: Path) -> Iterator[None]:
    """What ``sbatch`` passes on to the job: the cluster, the probe on PYTHONPATH, W&B offline."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("SLURM_CONF", slurm_conf)
        patch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(HERE), os.environ.get("PYTHONPATH")])))
        patch.setenv("WANDB_MODE", "offline")
        patch.chdir(workdir)
        yield


def submit(slurm_conf: str, root: Path, *args: str) -> Job:
    out = io.StringIO()
    with job_environment(slurm_conf, root.parent), contextlib.redirect_stdout(out):
        main(["submit", str(QUICKSTART), "--job-name", "tiny", "--root-dir", str(root), "--time", "10", *args])
    return Job(out.getvalue().strip(), root, slurm_conf)


def final_weights(job: Job) -> dict[str, torch.Tensor]:
    return torch.load(job.run_dir / "checkpoints" / "last.ckpt", weights_only=False)["state_dict"]


@pytest.fixture(scope="module")
def straight_job(slurm_conf, tmp_path_factory) -> Job:
    """The tiny fine-tune as a 2-task job on one node, run to the end."""
    job = submit(slurm_conf, tmp_path_factory.mktemp("straight") / "runs", "--", *JOB_ARGS)
    job.wait_done(timeout=240)
    return job


@pytest.fixture(scope="module")
def requeued_job(slurm_conf, tmp_path_factory, straight_job) -> Job:
    """The same job, sent SIGUSR1 mid-epoch (as SLURM does 90 s before the time limit)."""
    job = submit(slurm_conf, tmp_path_factory.mktemp("requeued") / "runs", "--", *JOB_ARGS)

    def mid_epoch() -> bool:
        batches = job.events(0, "batch")
        return bool(batches) and batches[-1]["global_step"] >= SIGNAL_AT_STEP and batches[-1]["batch_idx"] == 1

    job.wait(mid_epoch, f"training step {SIGNAL_AT_STEP}", timeout=240)
    slurm(slurm_conf, "scancel", "--signal=USR1", job.id)
    # SLURM holds a requeued job back for the credential lifetime (cluster.sh: 10 s; 120 s by default)
    job.wait_done(timeout=300)
    return job


@pytest.mark.parametrize("template", ["cpu", "gpu", "ddp", "multinode_ddp", "multinode_fsdp"])
def test_dry_run_scripts_are_accepted_by_sbatch_test_only(template, slurm_conf, tmp_path, capsys):
    options = {
        "cpu": ["--", "--trainer.devices=2", "--trainer.strategy=ddp"],
        "gpu": ["--gpus-per-node", "1", "--partition", "gpu"],
        "ddp": ["--gpus-per-node", "4", "--partition", "gpu"],
        "multinode_ddp": ["--nodes", "2", "--gpus-per-node", "4", "--partition", "gpu", "--strategy", "ddp"],
        "multinode_fsdp": ["--nodes", "2", "--gpus-per-node", "4", "--partition", "gpu", "--strategy", "fsdp"],
    }[template]
    with job_environment(slurm_conf, tmp_path):
        main(["submit", "--dry-run", str(QUICKSTART), "--time", "30", *options])
    script = capsys.readouterr().out
    result = slurm(slurm_conf, "sbatch", "--test-only", stdin=script)
    assert "# trustlit on" in script
    assert result.returncode == 0 and "to start at" in result.stderr, result.stderr
    assert list(tmp_path.iterdir()) == [], "--dry-run writes nothing"


def test_two_task_job_runs_ddp_under_slurm_on_both_ranks(straight_job):
    job = straight_job
    starts = [job.events(rank, "train_start") for rank in (0, 1)]
    assert [len(s) for s in starts] == [1, 1], job.log[-3000:]
    for rank, (start,) in enumerate(starts):
        assert start["cluster_environment"] == "SLURMEnvironment"
        assert (start["global_rank"], start["world_size"]) == (rank, 2)
    assert starts[0][0]["master_port"] == starts[1][0]["master_port"]
    ends = [job.events(rank, "train_end") for rank in (0, 1)]
    assert [e[-1]["global_step"] for e in ends] == [MAX_STEPS, MAX_STEPS]
    assert ends[0][-1]["params_sha256"] == ends[1][-1]["params_sha256"], "DDP ranks must hold identical parameters"
    assert (job.run_dir / "checkpoints" / "last.ckpt").is_file()
    assert not list(job.run_dir.glob("hpc_ckpt_*.ckpt"))
    # one offline W&B run, written by rank 0 only, named after the job
    wandb_id = starts[0][0]["wandb_id"]
    assert wandb_id.endswith(f"-{job.id}") and starts[1][0]["wandb_id"] is None
    runs = list((job.run_dir / "wandb").glob("offline-run-*"))
    assert [run.name.endswith(f"-{wandb_id}") for run in runs] == [True]
    assert list(runs[0].glob("run-*.wandb"))
    assert "Traceback" not in job.log


def test_requeued_job_resumes_from_its_hpc_checkpoint_in_the_same_wandb_run(requeued_job):
    job = requeued_job
    assert job.field("Restarts") == "1"
    assert (job.run_dir / "hpc_ckpt_1.ckpt").is_file()
    assert f"Restored all states from the checkpoint at {job.run_dir / 'hpc_ckpt_1.ckpt'}" in job.log
    for rank in (0, 1):
        starts = job.events(rank, "train_start")
        assert [(s["restart"], s["cluster_environment"]) for s in starts] == [
            (0, "SLURMEnvironment"),
            (1, "SLURMEnvironment"),
        ]
        assert starts[1]["global_step"] >= SIGNAL_AT_STEP, "the restart resumes, it does not start over"
        assert job.events(rank, "train_end")[-1]["global_step"] == MAX_STEPS
    first, second = (s["wandb_id"] for s in job.events(0, "train_start"))
    assert first == second and first.endswith(f"-{job.id}"), "the requeued job continues the same W&B run"
    runs = list((job.run_dir / "wandb").glob("offline-run-*"))
    assert len(runs) == 2 and all(run.name.endswith(f"-{first}") for run in runs)


def batches_seen(job: Job, rank: int) -> dict[tuple[int, int], list[int]]:
    """``(epoch, batch_idx) -> sample indices`` of the batches a rank trained on (after a restart: the redone ones)."""
    return {(b["epoch"], b["batch_idx"]): b["indices"] for b in job.events(rank, "batch")}


def test_requeued_job_ends_with_the_weights_of_the_uninterrupted_one(requeued_job, straight_job):
    resumed, straight = final_weights(requeued_job), final_weights(straight_job)
    assert resumed.keys() == straight.keys()
    difference = max((resumed[k] - straight[k]).abs().max().item() for k in resumed)
    # which batches differ explains a failure: the data order after the restart, or the state restored
    seen, expected = batches_seen(requeued_job, 0), batches_seen(straight_job, 0)
    differing = [key for key in expected if seen.get(key) != expected[key]]
    detail = (
        f"rank 0 trained on other samples at (epoch, batch) {differing[0]}: {seen.get(differing[0])} instead of "
        f"{expected[differing[0]]} ({len(differing)} batches differ)"
        if differing
        else "every batch had the same samples, so the restored state differs"
    )
    assert difference <= 1e-6, (
        f"the run requeued mid-epoch (SIGUSR1 at step {SIGNAL_AT_STEP}, batch 1 of epoch 2) ends {difference:.3g} "
        f"away from the uninterrupted run: mid-epoch resume from hpc_ckpt is not exact; {detail}"
    )
