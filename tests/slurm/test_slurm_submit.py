"""``trustlit slurm submit`` without a cluster: rendering, template choice, and refusals.

``sbatch`` is replaced by a script that records each call, so a refused combination is proven
to submit nothing, and to write nothing either.
"""

from __future__ import annotations

import re
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from trustlit.cli import main as trustlit_main
from trustlit.slurm import TEMPLATES, main

REPO_ROOT = Path(__file__).resolve().parents[2]
QUICKSTART = REPO_ROOT / "recipes" / "quickstart" / "finetune_fictitious.yaml"
WANDB = REPO_ROOT / "configs" / "logger" / "wandb.yaml"
CPU_DDP = ["--", "--trainer.devices=2", "--trainer.strategy=ddp"]
# (submit arguments, template): one layout per template
LAYOUTS = {
    "cpu": [str(QUICKSTART), *CPU_DDP],
    "gpu": [str(QUICKSTART), "--gpus-per-node", "1"],
    "ddp": [str(QUICKSTART), "--gpus-per-node", "2", "--", "--trainer.strategy=ddp"],
    "multinode_ddp": [str(QUICKSTART), "--nodes", "2", "--gpus-per-node", "4", "--strategy", "ddp"],
    "multinode_fsdp": [str(QUICKSTART), "--nodes", "2", "--gpus-per-node", "4", "--strategy", "fsdp"],
}


@pytest.fixture()
def fake_sbatch(tmp_path, monkeypatch) -> Path:
    """An ``sbatch`` on PATH that records its arguments and stdin in ``calls`` and answers job id 4242."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    calls = tmp_path / "calls"
    script = bin_dir / "sbatch"
    script.write_text(f'#!/bin/sh\necho "$@" >> {calls}\ncat >> {calls}\necho "4242;cluster"\n')
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{bin_dir}:{__import__('os').environ['PATH']}")
    monkeypatch.chdir(tmp_path)
    return calls


def render(capsys, *args: str) -> str:
    main(["submit", "--dry-run", *args])
    return capsys.readouterr().out


def test_help_lists_the_options(capsys):
    with pytest.raises(SystemExit) as exit_info:
        trustlit_main(["slurm", "--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    for option in ("--nodes", "--gpus-per-node", "--cpus-per-task", "--time", "--partition", "--account"):
        assert option in out
    assert "--job-name" in out and "--dry-run" in out
    assert all(name in out for name in TEMPLATES)


@pytest.mark.parametrize("template", list(LAYOUTS))
def test_every_template_renders_a_complete_script(template, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    script = render(capsys, "--time", "01:00:00", "--partition", "p1", "--account", "a1", *LAYOUTS[template])
    header = (REPO_ROOT / "slurm" / f"{template}.sbatch").read_text().splitlines()[:2]
    assert script.splitlines()[:2] == header, f"rendered from slurm/{template}.sbatch"
    assert "{{" not in script and "}}" not in script
    nodes = 2 if template.startswith("multinode") else 1
    devices = {"cpu": 2, "gpu": 1, "ddp": 2}.get(template, 4)
    for line in (
        f"#SBATCH --nodes={nodes}",
        f"#SBATCH --ntasks-per-node={devices}",
        "#SBATCH --signal=SIGUSR1@90",
        "#SBATCH --requeue",
        "#SBATCH --open-mode=append",
        "#SBATCH --time=01:00:00",
        "#SBATCH --partition=p1",
        "#SBATCH --account=a1",
        "set -eo pipefail",
        "RUN_DIR=",
        f"--trainer.num_nodes={nodes}",
        f"--trainer.devices={devices}",
        '--trainer.default_root_dir="$RUN_DIR"',
    ):
        assert line in script, line
    assert re.search(r"^RUN_DIR=\S+/\$SLURM_JOB_ID$", script, re.M)
    assert re.search(r"^export WANDB_RUN_ID=\S*\$SLURM_JOB_ID", script, re.M)
    assert "export MASTER_PORT=" in script and "SLURM_STEP_ID" in script
    assert re.search(r"^srun ", script, re.M)
    assert ("#SBATCH --gpus-per-node=" in script) == (template != "cpu")
    assert ("--trainer.strategy=fsdp" in script) == (template == "multinode_fsdp")
    assert subprocess.run(["bash", "-n"], input=script, text=True).returncode == 0
    assert list(tmp_path.iterdir()) == [], "--dry-run writes nothing"


def test_the_logger_writes_into_the_job_directory(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    script = render(capsys, str(QUICKSTART), *CPU_DDP, "-c", str(WANDB))
    assert '--trainer.logger.init_args.save_dir="$RUN_DIR"' in script
    assert f"-c {WANDB}" in script, "an option and its value stay on one line"
    script = render(capsys, str(QUICKSTART), *CPU_DDP, "--trainer.logger=false")
    assert "save_dir" not in script
    # a flag without a value does not swallow the next option
    script = render(capsys, str(QUICKSTART), *CPU_DDP, "--print_config", "-c", str(WANDB))
    assert '--trainer.logger.init_args.save_dir="$RUN_DIR"' in script


def test_submit_prints_the_job_id_and_creates_the_log_directory(fake_sbatch, tmp_path, capsys):
    main(["submit", str(QUICKSTART), "--root-dir", "out", "--job-name", "tiny", *CPU_DDP])
    assert capsys.readouterr().out == "4242\n"
    calls = fake_sbatch.read_text()
    assert calls.startswith("--parsable\n#!/bin/bash")
    assert f"#SBATCH --output={tmp_path}/out/%x-%j.out" in calls
    assert (tmp_path / "out").is_dir()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ([str(QUICKSTART), "--ntasks-per-node", "1", *CPU_DDP], r"--ntasks-per-node=1 but trainer.devices=2.*one task"),
        ([str(QUICKSTART), "--gpus-per-node", "2", "--", "--trainer.devices=4"], r"--trainer.devices=4.*devices=2"),
        ([str(QUICKSTART), "--nodes", "2", *CPU_DDP], r"nodes=2 with accelerator=cpu.*--gpus-per-node"),
        ([str(QUICKSTART), "--nodes", "2", "--gpus-per-node", "2", "--strategy", "ddp_spawn"], r"ddp_spawn.*srun"),
        ([str(QUICKSTART), "--", "--trainer.devices=2", "--trainer.strategy=fsdp"], r"fsdp with accelerator=cpu"),
        ([str(QUICKSTART), "--", "--trainer.devices=-1"], r"trainer.devices=-1.*positive integer"),
        ([str(QUICKSTART), "--gpus-per-node", "1", "--job-name", "bash"], r"--job-name='bash'"),
        ([str(QUICKSTART), "--", "--trainer.default_root_dir=/x"], r"default_root_dir is set per job"),
        ([str(QUICKSTART), "--", "--trainer.devices", "-1"], r"trainer.devices=-1.*positive integer"),
        (["no/such/recipe.yaml"], r"recipe not found: .*no/such/recipe.yaml"),
        ([str(QUICKSTART), *CPU_DDP, "-c", "no/such/config.yaml"], r"config file not found: no/such/config.yaml"),
    ],
    ids=[
        "ntasks-not-devices",
        "devices-not-gpus",
        "multinode-cpu",
        "spawn-under-srun",
        "fsdp-on-cpu",
        "devices-auto",
        "interactive-job-name",
        "root-dir-override",
        "devices-negative-as-separate-value",
        "missing-recipe",
        "missing-config",
    ],
)
def test_bad_combinations_are_named_and_nothing_is_submitted_or_written(fake_sbatch, tmp_path, args, message):
    before = sorted(tmp_path.rglob("*"))
    with pytest.raises(SystemExit, match=message) as exit_info:
        main(["submit", *args])
    assert str(exit_info.value).startswith("trustlit slurm submit: error: ")
    assert not fake_sbatch.exists(), "sbatch must not be called"
    assert sorted(tmp_path.rglob("*")) == before


def test_sbatch_refusal_is_reported(fake_sbatch, tmp_path):
    (tmp_path / "bin" / "sbatch").write_text("#!/bin/sh\necho 'sbatch: error: invalid partition' >&2\nexit 1\n")
    with pytest.raises(SystemExit, match="sbatch refused the job: sbatch: error: invalid partition"):
        main(["submit", str(QUICKSTART), *CPU_DDP])


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("--model.init_args.learning_rat=0.1", r"unknown key 'learning_rat' under 'model'"),
        ("--trainer.max_epochs=many", r"trainer.max_epochs=many: expected int or None"),
    ],
    ids=["unknown-key", "bad-value"],
)
def test_a_typo_in_the_overrides_fails_at_submit(fake_sbatch, tmp_path, override, message):
    before = sorted(tmp_path.rglob("*"))
    with pytest.raises(SystemExit, match=message):
        main(["submit", str(QUICKSTART), *CPU_DDP, override])
    assert not fake_sbatch.exists(), "sbatch must not be called"
    assert sorted(tmp_path.rglob("*")) == before


def test_submit_validates_without_importing_other_families():
    code = (
        "import sys\nfrom trustlit.slurm import check_command\n"
        f"check_command({str(QUICKSTART)!r}, ['--trainer.devices=2'])\n"
        "print(sorted({m.split('.')[1] for m in sys.modules if m.startswith('trustlit.')}))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    families = eval(out.strip().splitlines()[-1])
    assert "privacy" not in families and "safety" not in families
