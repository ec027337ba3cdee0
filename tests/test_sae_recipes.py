"""The SAE recipes end to end through the CLI: harvest a tiny Llama (recipes/interpret/harvest_tiny.yaml),
train MP-SAE on it with the tiny recipe and with the SmolLM2 recipe at tiny size, and the errors a
user meets on that path: a harvest that is not there, activations of another width."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import REPO_ROOT

from trustlit.cli import main, run_cli

INTERPRET = REPO_ROOT / "recipes" / "interpret"


@pytest.fixture(scope="module")
def tiny_harvest(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("harvest_tiny")
    main(["predict", "-c", str(INTERPRET / "harvest_tiny.yaml"), f"--trainer.default_root_dir={root}"])
    return root / "activations"


def fit(recipe: str, root: Path, *overrides: str):
    args = ["fit", "-c", str(INTERPRET / recipe), "--trainer.fast_dev_run=true", f"--trainer.default_root_dir={root}"]
    return run_cli([*args, *overrides])


def test_the_tiny_recipe_trains_mp_sae_on_a_tiny_harvest(tiny_harvest, tmp_path):
    cli = fit("mp_sae_tiny.yaml", tmp_path, f"--data.init_args.path={tiny_harvest}")
    assert cli.trainer.state.finished and cli.trainer.global_step == 1
    assert cli.model.k == 4 and cli.model.tokens_seen > 0
    assert {"train/fvu", "train/l0", "train/dead_fraction", "val/fvu"} <= set(cli.trainer.logged_metrics)


def test_the_smollm2_recipe_runs_at_tiny_size(tiny_harvest, tmp_path):
    overrides = [f"--data.init_args.path={tiny_harvest}", "--data.init_args.layer=1", "--model.init_args.d_in=32"]
    cli = fit("mp_sae_smollm2.yaml", tmp_path, *overrides, "--data.init_args.batch_size=64")
    assert cli.trainer.state.finished and cli.model.n_latents == 4096


def test_a_missing_harvest_names_the_index_file_and_how_to_make_it(tmp_path, capsys):
    missing = tmp_path / "nowhere" / "activations"
    with pytest.raises(SystemExit):
        main(
            [
                "fit",
                "-c",
                str(INTERPRET / "mp_sae_tiny.yaml"),
                f"--data.init_args.path={missing}",
                f"--trainer.default_root_dir={tmp_path}",
            ]
        )
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert line.startswith(f"trustlit: error: no activation index at {missing}/index.json: run `trustlit predict")


def test_activations_of_another_width_name_the_file_and_both_widths(tiny_harvest, tmp_path, capsys):
    with pytest.raises(SystemExit):
        main(
            [
                "fit",
                "-c",
                str(INTERPRET / "mp_sae_tiny.yaml"),
                f"--data.init_args.path={tiny_harvest}",
                "--model.init_args.d_in=48",
                f"--trainer.default_root_dir={tmp_path}",
            ]
        )
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert line == (
        f"trustlit: error: {tiny_harvest}/index.json (layer 1, site residual): activations of width 32, "
        "but MatchingPursuitSAE has d_in=48: set model.init_args.d_in=32"
    )
