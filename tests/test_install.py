"""A non-editable install works: build the wheel, install it into a fresh target, run it from elsewhere."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import REPO_ROOT


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> tuple[Path, dict[str, str]]:
    """The wheel installed (without dependencies, which the running environment has) into a target directory,
    and the environment that imports trustlit from there."""
    root = tmp_path_factory.mktemp("install")
    wheel_dir, target = root / "wheel", root / "site"
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "--quiet"]
    subprocess.run([*pip, "wheel", "--no-deps", "--no-build-isolation", "-w", wheel_dir, REPO_ROOT], check=True)
    (wheel,) = wheel_dir.glob("trustlit-*.whl")
    subprocess.run([*pip, "install", "--no-deps", "--target", target, wheel], check=True)
    env = {**os.environ, "PYTHONPATH": str(target), "WANDB_MODE": "offline"}
    return target, env


def trustlit(args: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess:
    command = [sys.executable, "-c", "import sys; from trustlit.cli import main; main(sys.argv[1:])", *args]
    return subprocess.run(command, env=env, cwd=cwd, capture_output=True, text=True, timeout=600)


@pytest.mark.slow
def test_the_installed_package_is_the_one_imported(installed, tmp_path):
    target, env = installed
    result = subprocess.run(
        [sys.executable, "-c", "import trustlit.resources as r; print(r.__file__); print(r.shipped_dir('recipes'))"],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=True,
    )
    module_file, recipes = result.stdout.split()
    assert Path(module_file).is_relative_to(target)
    assert Path(recipes) == target / "trustlit" / "_shipped" / "recipes"


@pytest.mark.slow
def test_installed_recipes_are_listed_by_name(installed, tmp_path):
    _, env = installed
    result = trustlit(["recipes"], env, tmp_path)
    assert result.returncode == 0, result.stderr
    shipped = sorted(
        p.relative_to(REPO_ROOT / "recipes").with_suffix("").as_posix() for p in (REPO_ROOT / "recipes").rglob("*.yaml")
    )
    assert [line.split()[0] for line in result.stdout.splitlines()] == shipped


@pytest.mark.slow
def test_an_installed_recipe_runs_by_name_from_another_directory(installed, tmp_path):
    _, env = installed
    overrides = [
        "--trainer.max_steps=1",
        "--trainer.limit_val_batches=0",
        "--trainer.enable_progress_bar=false",
        f"--trainer.default_root_dir={tmp_path / 'run'}",
        f"--trainer.logger.init_args.save_dir={tmp_path / 'run'}",
        '--model.init_args.lm.tiny={"hidden_size": 32, "num_layers": 1, "num_heads": 2}',
        "--data.init_args.fictitious.num_authors=4",
    ]
    result = trustlit(["fit", "-c", "quickstart/finetune_fictitious", *overrides], env, tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert (tmp_path / "run" / "checkpoints" / "last.ckpt").is_file()


@pytest.mark.slow
def test_installed_slurm_submit_renders_a_dry_run(installed, tmp_path):
    _, env = installed
    result = trustlit(["slurm", "submit", "quickstart/finetune_fictitious", "--dry-run"], env, tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "#SBATCH" in result.stdout and "srun" in result.stdout
