"""The IntrinsicDimension Callback (trustlit.interpret.layer_dimension), its pure part and the probe helper."""

from __future__ import annotations

import csv
import json
import logging

import lightning as L
import numpy as np
import pytest
import torch

from trustlit.data.mcqa import MCQADataModule
from trustlit.interpret.intrinsic_dimension import gride, mle, twonn
from trustlit.interpret.layer_dimension import (
    IntrinsicDimension,
    batch_representations,
    last_prompt_positions,
    layer_estimates,
)
from trustlit.interpret.probes import probe_accuracy
from trustlit.llm.module import CausalLMModule

LAYERS = 2
NUM_ITEMS = 54  # 6 invented authors x 9 facts


@pytest.fixture(scope="module")
def module() -> CausalLMModule:
    lm = {"name_or_path": "tiny-llama", "tiny": {"hidden_size": 32, "num_layers": LAYERS, "num_heads": 2}}
    return CausalLMModule(lm=lm, generate=False)


def mcqa(**kwargs) -> MCQADataModule:
    arguments = {"source": "fictitious", "eval_splits": ["full"], "batch_size": 16, "prompt_format": "chat"}
    return MCQADataModule(**{**arguments, "fictitious": {"num_authors": 6}, **kwargs})


def trainer(callback: IntrinsicDimension, root, **kwargs) -> L.Trainer:
    return L.Trainer(
        accelerator="cpu", logger=False, enable_progress_bar=False, enable_model_summary=False,
        callbacks=[callback], default_root_dir=str(root), **kwargs,
    )  # fmt: skip


def test_layer_estimates_is_each_estimator_per_layer():
    rng = np.random.default_rng(0)
    clouds = {0: rng.normal(size=(300, 3)) @ rng.normal(size=(3, 20)), 5: rng.normal(size=(300, 8))}
    results = layer_estimates(clouds, ["twonn", "mle", "gride"], discard_fraction=0.2, k=10, n1=2, n2=4)
    assert results == {
        "twonn": {layer: twonn(x, 0.2) for layer, x in clouds.items()},
        "mle": {layer: mle(x, 10) for layer, x in clouds.items()},
        "gride": {layer: gride(x, 2, 4) for layer, x in clouds.items()},
    }
    with pytest.raises(ValueError, match=r"unknown estimators \['pca'\]"):
        layer_estimates(clouds, ["pca"])


def test_last_prompt_positions_from_labels_or_the_attention_mask():
    labels = torch.tensor([[-100, -100, 7, 8, -100], [-100, -100, -100, -100, 9]])
    mask = torch.tensor([[1, 1, 1, 1, 0], [1, 1, 1, 1, 1]])
    assert last_prompt_positions({"labels": labels, "attention_mask": mask}).tolist() == [1, 3]
    assert last_prompt_positions({"attention_mask": mask}).tolist() == [3, 4]  # right padding
    assert last_prompt_positions({"attention_mask": torch.tensor([[0, 0, 1, 1], [0, 1, 1, 1]])}).tolist() == [3, 3]


def test_batch_representations_are_the_hidden_states_and_letter_scores(module):
    data = mcqa()
    data.tokenizer = module.tokenizer
    data.setup("validate")
    batch = next(iter(data.val_dataloader()[0]))
    model = module.model.eval()
    states, scores = batch_representations(model, batch, [0, 1])
    with torch.no_grad():
        output = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], output_hidden_states=True)
    rows = torch.arange(len(batch["index"]))
    positions = (batch["labels"] != -100).int().argmax(dim=1) - 1
    torch.testing.assert_close(states[0], output.hidden_states[1][rows, positions])  # block 0's output
    log_probs = output.logits[rows, positions].log_softmax(dim=-1)
    torch.testing.assert_close(scores, log_probs.gather(1, batch["choice_ids"]))
    without_choices = {key: value for key, value in batch.items() if key != "choice_ids"}
    stopped, none = batch_representations(model, without_choices, [0])
    assert none is None
    torch.testing.assert_close(stopped[0], states[0])


@pytest.mark.slow
def test_callback_logs_one_value_per_layer_and_estimator_and_writes_tables(module, tmp_path):
    callback = IntrinsicDimension(probe_folds=3, k=10, output_dir=str(tmp_path / "id"))
    run = trainer(callback, tmp_path)
    run.validate(module, datamodule=mcqa(), verbose=False)
    logged = {name for name in run.callback_metrics if name.startswith(("id/", "probe/", "mcqa/"))}
    expected = {f"id/{e}/layer_{layer}" for e in ("twonn", "mle", "gride") for layer in range(LAYERS)}
    assert logged == expected | {f"probe/layer_{layer}" for layer in range(LAYERS)} | {"mcqa/accuracy"}
    states = callback.representations
    assert sorted(states) == list(range(LAYERS)) and all(len(x) == NUM_ITEMS for x in states.values())
    ids = layer_estimates(states, k=10)
    for name, per_layer in ids.items():
        for layer, value in per_layer.items():
            assert run.callback_metrics[f"id/{name}/layer_{layer}"].item() == pytest.approx(value, rel=1e-6)
    accuracy = (callback.predicted == callback.correct).double().mean().item()
    assert run.callback_metrics["mcqa/accuracy"].item() == pytest.approx(accuracy)
    assert sorted(callback.correct.tolist()) == sorted(mcqa_letters(module))
    table = json.loads((tmp_path / "id" / "validation_epoch000.json").read_text())
    assert table["num_samples"] == NUM_ITEMS and table["id"]["mle"]["1"] == pytest.approx(ids["mle"][1])
    with open(tmp_path / "id" / "validation_epoch000.csv") as file:
        rows = list(csv.reader(file))
    assert rows[0] == ["layer", "twonn", "mle", "gride", "probe"] and len(rows) == 1 + LAYERS
    assert (tmp_path / "id" / "validation_epoch000.png").read_bytes().startswith(b"\x89PNG")


def mcqa_letters(module: CausalLMModule) -> list[int]:
    data = mcqa()
    data.tokenizer = module.tokenizer
    data.setup("validate")
    return [["A", "B", "C", "D"].index(sample["answer"]) for sample in data.eval_datasets[0].samples]


@pytest.mark.slow
def test_test_stage_only_and_chosen_layers(module, tmp_path):
    callback = IntrinsicDimension(estimators=["twonn"], layers=[-1], stages=["test"])
    run = trainer(callback, tmp_path)
    run.validate(module, datamodule=mcqa(), verbose=False)
    assert not [name for name in run.callback_metrics if name.startswith("id/")]
    run.test(module, datamodule=mcqa(), verbose=False)
    assert {name for name in run.callback_metrics if name.startswith("id/")} == {f"id/twonn/layer_{LAYERS - 1}"}
    assert (tmp_path / "intrinsic_dimension" / "test_epoch000.json").is_file()  # next to the logs


def test_a_layer_the_model_does_not_have_is_an_error(module, tmp_path):
    with pytest.raises(ValueError, match=rf"layer 5 does not exist: the model has {LAYERS} layers \(0..{LAYERS - 1}\)"):
        trainer(IntrinsicDimension(layers=[0, 5]), tmp_path).validate(module, datamodule=mcqa(), verbose=False)


def test_fewer_samples_than_neighbours_is_an_error_but_skipped_under_fast_dev_run(module, tmp_path, caplog):
    with pytest.raises(ValueError, match=r"mle needs at least 21 samples, 10 were gathered"):
        trainer(IntrinsicDimension(), tmp_path).validate(module, datamodule=mcqa(max_samples=10), verbose=False)
    run = trainer(IntrinsicDimension(), tmp_path, fast_dev_run=True)
    with caplog.at_level(logging.WARNING, logger="trustlit.interpret.layer_dimension"):
        run.validate(module, datamodule=mcqa(max_samples=10), verbose=False)
    assert "skipped under fast_dev_run" in caplog.text
    assert {name.split("/")[1] for name in run.callback_metrics if name.startswith("id/")} == {"twonn", "gride"}


def test_bad_arguments_name_the_value():
    with pytest.raises(ValueError, match=r"estimators=\['pca'\] is invalid"):
        IntrinsicDimension(estimators=["pca"])
    with pytest.raises(ValueError, match=r"stages=\['train'\] is invalid"):
        IntrinsicDimension(stages=["train"])
    with pytest.raises(ValueError, match=r"n1=2, n2=2 are invalid"):
        IntrinsicDimension(n1=2, n2=2)
    with pytest.raises(ValueError, match=r"discard_fraction"):
        IntrinsicDimension(discard_fraction=1.5)


def test_probe_accuracy_reads_a_linearly_coded_label_and_not_noise():
    rng = np.random.default_rng(0)
    labels = rng.integers(0, 4, size=400)
    coded = rng.normal(size=(400, 30)) + 3 * np.eye(4)[labels] @ rng.normal(size=(4, 30))
    assert np.mean(probe_accuracy(coded, labels)) > 0.9
    assert np.mean(probe_accuracy(rng.normal(size=(400, 30)), labels)) < 0.4
    with pytest.raises(ValueError, match=r"at least 5 samples each, got counts \{0: 3, 1: 3\}"):
        probe_accuracy(rng.normal(size=(6, 2)), np.array([0, 1] * 3))


@pytest.mark.slow
def test_wandb_gets_a_table_and_a_line_plot(module, tmp_path, monkeypatch):
    import wandb
    from lightning.pytorch.loggers import WandbLogger

    monkeypatch.delenv("WANDB_MODE", raising=False)
    monkeypatch.setenv("WANDB_DIR", str(tmp_path))
    logger = WandbLogger(offline=True, save_dir=str(tmp_path), project="trustlit-test")
    run = L.Trainer(
        accelerator="cpu", logger=logger, enable_progress_bar=False, enable_model_summary=False,
        callbacks=[IntrinsicDimension(estimators=["twonn"], layers=[0])], default_root_dir=str(tmp_path),
    )  # fmt: skip
    run.validate(module, datamodule=mcqa(), verbose=False)
    logger.experiment.finish()
    wandb.teardown()  # flushes the offline record
    records = list((tmp_path / "wandb").glob("offline-run-*/run-*.wandb"))
    assert len(records) == 1
    content = records[0].read_bytes()
    assert b"id/validation/table" in content and b"id/validation/plot" in content
    for suffix in ("png", "csv", "json"):  # and the files for everyone, in trainer.log_dir (W&B's save_dir)
        assert (tmp_path / "intrinsic_dimension" / f"validation_epoch000.{suffix}").is_file()
