from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
import wandb
import yaml
from helpers import QUICKSTART, REPO_ROOT, SHARED_DATA, TINY, import_class_path, read_recipe

from trustlit import hardware
from trustlit.analysis import AnalysisModule
from trustlit.cli import main, run_cli
from trustlit.data.activations import ActivationDataModule
from trustlit.loggers import wandb_offline_from_env
from trustlit.resources import list_recipes

RECIPES = sorted((REPO_ROOT / "recipes").rglob("*.yaml"))


def fit_args(root: Path, *extra: str, configs: tuple[Path, ...] = ()) -> list[str]:
    """The quickstart at tiny size, writing only under ``root``; ``configs`` are extra ``-c`` files."""
    files = [arg for config in (QUICKSTART, *configs) for arg in ("-c", str(config))]
    root_args = [f"--trainer.default_root_dir={root}", f"--trainer.logger.init_args.save_dir={root}"]
    return ["fit", *files, *TINY, *root_args, *extra]


def written_files(root: Path) -> list[Path]:
    return [p for p in root.rglob("*") if p.is_file()] if root.exists() else []


def test_recipes_exist_and_are_listed_with_descriptions(capsys):
    assert QUICKSTART in RECIPES
    listed = dict(list_recipes(REPO_ROOT / "recipes"))
    assert listed["quickstart/finetune_fictitious"].startswith("Fine-tune a tiny Llama")
    main(["recipes"])
    out = capsys.readouterr().out
    assert all(r.relative_to(REPO_ROOT / "recipes").with_suffix("").as_posix() in out for r in RECIPES)


@pytest.fixture(scope="module")
def tiny_harvest(tmp_path_factory) -> Path:
    """Activations of the tiny harvest recipe (width 32, layers 0 and -1): what the SAE recipes train on here."""
    root = tmp_path_factory.mktemp("harvest")
    recipe = REPO_ROOT / "recipes" / "interpret" / "harvest_tiny.yaml"
    main(["predict", "-c", str(recipe), f"--trainer.default_root_dir={root}"])
    return root / "activations"


def subcommand(recipe: Path) -> str:
    """``test`` for an analysis recipe (its module refuses ``fit``), ``fit`` for every other."""
    model_class = import_class_path(read_recipe(recipe)["model"]["class_path"])
    return "test" if issubclass(model_class, AnalysisModule) else "fit"


def offline_stand_ins(recipe: Path, harvest: Callable[[], Path]) -> list[str]:
    """Overrides that run a recipe here: a tiny model for checkpoints and pretrained models, the
    shared TOFU copy for the hub dataset, a layer the tiny model has, small attribution budgets, and, for recipes
    that learn from harvested activations, the tiny harvest (``harvest()``) and its width."""
    config = read_recipe(recipe)
    model_args, data_args = config["model"]["init_args"], config["data"]["init_args"]
    overrides = []
    if import_class_path(config["data"]["class_path"]) is ActivationDataModule:
        overrides += [f"--data.init_args.path={harvest()}", "--data.init_args.layer=-1", "--model.init_args.d_in=32"]
    if not model_args.get("lm", {}).get("name_or_path", "tiny-").startswith("tiny-"):
        tiny = '{"hidden_size": 32, "num_layers": 3, "num_heads": 2}'
        overrides += ["--model.init_args.lm.name_or_path=tiny-llama", f"--model.init_args.lm.tiny={tiny}"]
    if data_args.get("source") == "locuslab/TOFU":
        overrides += [f"--data.init_args.source={SHARED_DATA / 'tofu'}", "--data.init_args.max_samples=8"]
    if "layer" in model_args:
        overrides.append("--model.init_args.layer=1")
    if "n_holdout" in model_args:  # attribution games: a small budget (the recipes' budgets are for the real runs)
        overrides += ["--model.init_args.budget=40", "--model.init_args.n_holdout=16"]
    if "generations" in model_args:  # Contimask: a few optimiser steps per mask
        overrides += ["--model.init_args.steps=20", "--model.init_args.generations=4"]
    if "max_points" in model_args:
        overrides += ["--model.init_args.max_points=2", "--model.init_args.seeds=1"]
    if "sir_runs" in model_args:  # vaccination: one seed, one epsilon, a few epidemics
        overrides += ["--model.init_args.seeds=1", "--model.init_args.epsilons=[1.0]", "--model.init_args.sir_runs=5"]
    if "non_neighbour_budget" in model_args:  # PoisonM: 3 canaries each, 2 poisons per non-member, one epoch
        attack = {"canaries": 3, "non_neighbour_budget": 2, "epochs": 1}
        overrides += [f"--model.init_args.{key}={value}" for key, value in attack.items()]
    if "subsets" in model_args:  # targeted poisoning: one class, one budget, one seed, a small sample
        poisoning = {"classes": "[intervals]", "etas": "[0.05]", "sample_size": 60, "seeds": 1, "subsets": 2,
                     "bit_pairs": 2}  # fmt: skip
        overrides += [f"--model.init_args.{key}={value}" for key, value in poisoning.items()]
    if "leaked_fraction" in data_args:  # BridgePure: 64 generated 8x8 images, a tiny UNet, the random-noise control
        leak = {"source": "generated", "num_train": 64, "num_test": 16, "protection": "{name: random_noise}"}
        overrides += [f"--data.init_args.{key}={value}" for key, value in leak.items()]
        overrides += ["--model.init_args.image_size=8", "--model.init_args.block_out_channels=[8,16]"]
    if "attack_rounds" in model_args:  # DEGauss: a tiny scene and editor, two steps of everything
        tiny = {"steps": 2, "views_per_step": 2, "photoguard_steps": 2, "attack_rounds": 1, "attack_fit_steps": 2,
                "editor_pairs": 8, "editor_epochs": 1, "editor_encoder": "structured"}  # fmt: skip
        overrides += [f"--model.init_args.{key}={value}" for key, value in tiny.items()]
        overrides += ["--data.init_args.views=4", "--data.init_args.image_size=16"]
    if "instruction_encoder" in data_args:  # the stand-in editor: 8 pairs, structured instructions instead of MiniLM
        overrides += ["--data.init_args.pairs=8", "--data.init_args.val_pairs=4"]
        overrides += ["--data.init_args.instruction_encoder=structured", "--model.init_args.encoder=structured"]
    if data_args.get("protection") and "leaked_fraction" not in data_args:  # availability: tiny release, one EM round
        overrides += ["--data.init_args.num_train=64", "--data.init_args.num_test=32"]
        overrides.append('--data.init_args.protection={"name": "error_minimizing", "max_rounds": 1, "width": 4}')
    if "sources" in data_args:  # StegoZip: a few messages, the shared TOFU copy for the hub id
        overrides += [f"--data.init_args.sources=[fictitious,{SHARED_DATA / 'tofu'}]"]
        overrides.append("--data.init_args.max_messages=4")
    if "encoder" in data_args:  # concept surrogates: embed the items of 10 authors, not 100
        overrides.append("--data.init_args.num_authors=10")
    if data_args.get("source") == "secret-keeper":
        sizes = {"num_align": 20, "num_finetune": 20, "num_harmful": 10, "num_test": 4}
        overrides += [f"--data.init_args.{key}={value}" for key, value in sizes.items()]
    return overrides


@pytest.mark.parametrize("recipe", RECIPES, ids=lambda p: str(p.relative_to(REPO_ROOT / "recipes")))
def test_every_recipe_runs_under_fast_dev_run(recipe, tmp_path, monkeypatch, request):
    monkeypatch.chdir(tmp_path)
    command = subcommand(recipe)
    args = [command, "-c", str(recipe), "--trainer.fast_dev_run=true", f"--trainer.default_root_dir={tmp_path}"]
    cli = run_cli([*args, *offline_stand_ins(recipe, lambda: request.getfixturevalue("tiny_harvest"))])
    assert cli.trainer.state.finished
    # one training batch ran (a global step, except for Contimask, which steps optimisers of its own per batch)
    assert cli.trainer.fit_loop.epoch_loop.batch_progress.total.completed == (1 if command == "fit" else 0)


def final_weights(root: Path) -> dict[str, torch.Tensor]:
    return torch.load(root / "checkpoints" / "last.ckpt", weights_only=False)["state_dict"]


@pytest.mark.slow
def test_resume_from_last_equals_an_uninterrupted_run(tmp_path):
    common = ["--trainer.limit_val_batches=0", "--model.init_args.lr_schedule=constant", "--trainer.logger=false"]
    interrupted, uninterrupted = tmp_path / "interrupted", tmp_path / "uninterrupted"
    run_cli(fit_args(interrupted, *common, "--trainer.max_epochs=2"))
    halfway = final_weights(interrupted)
    resumed = run_cli(fit_args(interrupted, *common, "--trainer.max_epochs=4", "--ckpt_path=last"))
    run_cli(fit_args(uninterrupted, *common, "--trainer.max_epochs=4"))
    assert resumed.trainer.current_epoch == 4
    a, b = final_weights(interrupted), final_weights(uninterrupted)
    assert a.keys() == b.keys()
    assert any(not torch.equal(a[k], halfway[k]) for k in a), "the resumed run must have trained"
    assert max((a[k] - b[k]).abs().max().item() for k in a) <= 1e-6


def test_full_config_is_logged_as_hyperparameters(tmp_path):
    run_cli(fit_args(tmp_path, "--trainer.max_steps=2", "--trainer.limit_val_batches=0", "--model.init_args.lr=0.01"))
    hparams = yaml.safe_load(next(tmp_path.rglob("hparams.yaml")).read_text())
    assert hparams["data"]["class_path"] == "trustlit.data.QADataModule"
    assert hparams["data"]["init_args"]["fictitious"]["num_authors"] == 6
    assert hparams["model"]["init_args"]["lr"] == 0.01
    assert hparams["trainer"]["max_steps"] == 2
    assert hparams["seed_everything"] == 0
    assert "lr" not in hparams, "the module's hparams are not logged a second time, flattened"
    assert (tmp_path / "checkpoints" / "last.ckpt").is_file()


def test_a_bf16_run_on_a_cpu_without_native_bf16_is_warned_of(tmp_path, monkeypatch):
    monkeypatch.setattr(hardware, "slow_cpu_bf16", lambda: True)
    with pytest.warns(UserWarning, match="32-true"):
        run_cli(
            fit_args(
                tmp_path, "--trainer.max_steps=1", "--trainer.limit_val_batches=0", "--trainer.precision=bf16-mixed"
            )
        )


def test_wandb_logs_offline_with_the_full_config(tmp_path, monkeypatch):
    monkeypatch.delenv("WANDB_MODE", raising=False)
    monkeypatch.setenv("WANDB_DIR", str(tmp_path))
    wandb_config = REPO_ROOT / "configs" / "logger" / "wandb.yaml"
    cli = run_cli(fit_args(tmp_path, "--trainer.max_steps=2", "--trainer.limit_val_batches=0", configs=(wandb_config,)))
    run = cli.trainer.logger.experiment
    assert run.settings.mode in ("offline", "dryrun")
    assert run.config["model"]["class_path"] == "trustlit.CausalLMFineTuning"
    assert run.config["trainer"]["max_steps"] == 2
    run.finish()  # Lightning leaves the run open until exit
    wandb.teardown()  # waits for wandb's writer process to flush the offline record
    records = list((tmp_path / "wandb").glob("offline-run-*/run-*.wandb"))
    assert len(records) == 1
    assert b"trustlit.data.QADataModule" in records[0].read_bytes()  # what `wandb sync` uploads


def test_wandb_mode_from_environment(monkeypatch):
    monkeypatch.delenv("WANDB_MODE", raising=False)
    assert wandb_offline_from_env()
    monkeypatch.setenv("WANDB_MODE", "online")
    assert not wandb_offline_from_env()
    monkeypatch.setenv("WANDB_MODE", "disabled")
    assert not wandb_offline_from_env()


def test_unknown_recipe_key_is_named_and_nothing_is_written(tmp_path, capsys):
    with pytest.raises(SystemExit):
        main(fit_args(tmp_path, "--model.init_args.learning_rat=0.1"))
    assert "learning_rat" in capsys.readouterr().err
    recipe = tmp_path / "bad.yaml"
    recipe.write_text(QUICKSTART.read_text().replace("    lr: 3.0e-3\n", "    lr: 3.0e-3\n    learning_rat: 1\n"))
    with pytest.raises(SystemExit):
        main(["fit", "-c", str(recipe), f"--trainer.default_root_dir={tmp_path}"])
    assert "learning_rat" in capsys.readouterr().err
    assert written_files(tmp_path) == [recipe]


def test_missing_data_directory_is_named_and_nothing_is_written(tmp_path):
    missing = tmp_path / "no" / "such" / "dir"
    # jsonargparse re-raises errors of class construction as ValueError, message included
    with pytest.raises((FileNotFoundError, ValueError), match=re.escape(f"data directory not found: {missing}")):
        run_cli(fit_args(tmp_path / "run", f"--data.init_args.source={missing}"))
    assert written_files(tmp_path) == []


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ('{"question": "q1", "answer": "a1"}\n{"question": "q2"}\n', "full.json:2: missing or non-string 'answer'"),
        ("", "the dataset is empty"),
    ],
    ids=["line-without-answer", "empty"],
)
def test_bad_data_file_is_named_and_nothing_is_written(tmp_path, content, message):
    data = tmp_path / "data"
    data.mkdir()
    (data / "full.json").write_text(content)  # the quickstart trains on full
    (data / "forget10.json").write_text('{"question": "q", "answer": "a"}\n')
    with pytest.raises(ValueError, match=message):
        run_cli(fit_args(tmp_path / "run", f"--data.init_args.source={data}"))
    assert written_files(tmp_path / "run") == []


def test_checkpointing_can_be_turned_off(tmp_path):
    cli = run_cli(
        fit_args(
            tmp_path, "--trainer.max_steps=1", "--trainer.limit_val_batches=0", "--trainer.enable_checkpointing=false"
        )
    )
    assert cli.trainer.checkpoint_callback is None
    assert not (tmp_path / "checkpoints").exists()
