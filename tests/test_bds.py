"""BDS: weights, the two decoupled steps, the direction of the scheduler step, Langevin noise."""

from __future__ import annotations

import math

import lightning as L
import pytest
import torch
from helpers import SafetyBatches, quiet_trainer, safety_batch

from trustlit.safety.bds import BDS
from trustlit.safety.updates import add_langevin_noise, negative_entropy, schedule_weights, weighted_finetune_loss

TINY = {"name_or_path": "tiny-llama", "tiny": {"hidden_size": 32, "num_layers": 2, "num_heads": 2}}


def batches_over(tokenizer, num_samples: int, steps: int) -> list[dict]:
    """Hand-made batches whose fine-tuning samples carry indices spread over the mixture."""
    batches = []
    for step in range(steps):
        batch = safety_batch(tokenizer)
        batch["finetune"]["index"] = torch.tensor([(2 * step) % num_samples, (2 * step + 1) % num_samples])
        batches.append(batch)
    return batches


@pytest.mark.parametrize("support", ["dataset", "batch"])
def test_logit_gradient_sign_is_loss_minus_weighted_term(support):
    num_samples, index = 6, torch.tensor([0, 2, 3, 4, 5])
    logits = torch.randn(num_samples, generator=torch.Generator().manual_seed(3)).requires_grad_()
    losses = torch.tensor([0.05, 3.0, 0.2, 2.5, 0.1])
    if support == "dataset":  # the scalar scheduler: w = N softmax(z) over the mixture
        weights = schedule_weights(logits)[index]
        term = (weights * losses).sum() / num_samples
    else:  # the neural scheduler: w = B softmax(z) over the batch
        weights = schedule_weights(logits[index])
        term = (weights * losses).sum() / len(index)
    weighted_finetune_loss(losses, weights).backward()
    expected = torch.sign(losses - term.detach())
    assert torch.equal(torch.sign(logits.grad[index]), expected)
    assert expected.min() < 0 < expected.max()  # the case distinguishes both signs
    if support == "dataset":  # samples outside the batch gain weight
        outside = torch.ones(num_samples, dtype=torch.bool)
        outside[index] = False
        assert (logits.grad[outside] < 0).all()


def test_with_the_entropy_term_the_scheduler_minimiser_is_the_gibbs_distribution():
    losses, lam = torch.tensor([0.2, 3.0, 0.7, 1.5]), 0.8

    def scheduler_gradient(logits: torch.Tensor) -> torch.Tensor:
        logits = logits.clone().requires_grad_()
        weights = schedule_weights(logits)
        (weighted_finetune_loss(losses, weights) + lam * negative_entropy(weights)).backward()
        return logits.grad

    assert scheduler_gradient(-losses / lam).abs().max() < 1e-6  # p ∝ exp(-l / lambda_H) is stationary
    assert scheduler_gradient(torch.zeros(4)).abs().max() > 1e-2  # uniform weights are not
    assert negative_entropy(torch.ones(4)).item() == pytest.approx(-math.log(4))
    assert negative_entropy(torch.tensor([4.0, 0.0, 0.0, 0.0])).item() == pytest.approx(0.0)


def test_weights_start_at_one_and_sum_to_n_after_every_step(tokenizer):
    num_samples = 7

    class CheckWeights(L.Callback):
        def on_train_start(self, trainer, module) -> None:
            assert torch.equal(module.all_weights(), torch.ones(num_samples))

        def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx) -> None:
            weights = module.all_weights()
            assert weights.sum().item() == pytest.approx(num_samples, rel=1e-5)
            assert (weights > 0).all()

    module = BDS(TINY, lr=1e-3, scheduler_lr=0.5, langevin_temperature=0.01)
    trainer = quiet_trainer(max_steps=4, callbacks=[CheckWeights()])
    trainer.fit(module, datamodule=SafetyBatches(batches_over(tokenizer, num_samples, 8), num_samples))
    assert trainer.global_step == 4  # one step per batch: the scheduler's step is not counted
    assert module.hparams.num_samples == num_samples
    assert not torch.equal(module.all_weights(), torch.ones(num_samples))  # the scheduler moved


def test_model_and_scheduler_steps_touch_only_their_own_variables(tokenizer):
    for scheduler in ("scalar", "neural"):
        module = BDS(TINY, scheduler=scheduler, num_samples=4)
        batch = safety_batch(tokenizer)
        losses, features = module.sample_losses(batch["finetune"])
        weights = module.data_scheduler.batch_weights(batch["finetune"]["index"], features)
        weighted_finetune_loss(losses, weights.detach()).backward(retain_graph=True)
        assert all(p.grad is None for p in module.data_scheduler.parameters())
        assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in module.model.parameters())
        module.model.zero_grad(set_to_none=True)
        weighted_finetune_loss(losses.detach(), weights).backward()
        assert all(p.grad is None for p in module.model.parameters())
        assert all(p.grad is not None for p in module.data_scheduler.parameters())


def test_scheduler_state_is_saved_with_the_checkpoint(tokenizer, tmp_path):
    module = BDS(TINY, scheduler_lr=0.5)
    trainer = L.Trainer(
        accelerator="cpu", max_steps=2, default_root_dir=tmp_path, logger=False, enable_progress_bar=False
    )
    trainer.fit(module, datamodule=SafetyBatches(batches_over(tokenizer, 5, 2), 5))
    path = tmp_path / "bds.ckpt"
    trainer.save_checkpoint(path)
    restored = BDS.load_from_checkpoint(path)
    torch.testing.assert_close(restored.all_weights(), module.all_weights())
    assert restored.all_weights().sum().item() == pytest.approx(5, rel=1e-5)


def test_langevin_noise_has_the_sqrt_2_lr_t_scale():
    torch.manual_seed(0)
    z = torch.zeros(200_000)
    add_langevin_noise([z], lr=5e-3, temperature=0.2)
    assert z.std().item() == pytest.approx((2 * 5e-3 * 0.2) ** 0.5, rel=0.01)
    unchanged = torch.zeros(10)
    add_langevin_noise([unchanged], lr=5e-3, temperature=0.0)
    assert torch.equal(unchanged, torch.zeros(10))


def test_alignment_set_missing_and_bad_hyperparameters(tokenizer):
    batch = safety_batch(tokenizer)
    del batch["align"]
    with pytest.raises(ValueError, match=r"\['align'\].*alignment set"):
        quiet_trainer(max_steps=1).fit(BDS(TINY), datamodule=SafetyBatches([batch], 2, parts=("finetune", "harmful")))
    with pytest.raises(ValueError, match="scheduler must be 'scalar' or 'neural'"):
        BDS(TINY, scheduler="mlp")
    with pytest.raises(ValueError, match=r"BDS: langevin_temperature=-1\.0 is invalid, expected a number >= 0"):
        BDS(TINY, langevin_temperature=-1.0)
    with pytest.raises(ValueError, match=r"BDS: entropy_weight=-0\.5 is invalid, expected a number >= 0"):
        BDS(TINY, entropy_weight=-0.5)
    with pytest.raises(ValueError, match=r"BDS: scheduler_lr=0\.0 is invalid, expected a number > 0"):
        BDS(TINY, scheduler_lr=0.0)


def secret_keeper(**kwargs):
    from trustlit.data.safety import HarmfulFineTuningDataModule

    sizes = {"num_align": 40, "num_finetune": 60, "num_harmful": 20, "num_test": 20, "harmful_ratio": 0.25}
    return HarmfulFineTuningDataModule(batch_size=10, max_length=96, prompt_format="chat", **{**sizes, **kwargs})


@pytest.fixture(scope="module")
def trained_schedulers():
    """Scalar and neural BDS after a few epochs on a secret-keeper mixture with 25 % leaks."""
    modules = {}
    for scheduler in ("scalar", "neural"):
        L.seed_everything(0)
        module = BDS(TINY, scheduler=scheduler, lr=3e-3, scheduler_lr=0.2 if scheduler == "scalar" else 0.05)
        datamodule = secret_keeper()
        quiet_trainer(max_epochs=6).fit(module, datamodule=datamodule)
        modules[scheduler] = (module, datamodule)
    return modules


@pytest.mark.parametrize("scheduler", ["scalar", "neural"])
def test_harmful_samples_end_with_lower_weight(trained_schedulers, scheduler):
    module, datamodule = trained_schedulers[scheduler]
    weights, harmful = module.all_weights(), datamodule.finetune_harmful
    assert weights.sum().item() == pytest.approx(len(weights), rel=1e-4)
    assert weights[harmful].mean() < 0.9 * weights[~harmful].mean()


def test_neural_scheduler_scores_held_out_harmful_samples_lower(trained_schedulers):
    from trustlit.llm.prompts import collate_qa, encode_qa

    module, datamodule = trained_schedulers["neural"]

    def scores(records: list[dict]) -> torch.Tensor:
        encoded = [
            {**encode_qa(module.tokenizer, r["question"], r["answer"], "chat", 96), "index": i}
            for i, r in enumerate(records)
        ]
        return module.score(collate_qa(encoded, module.tokenizer.pad_token_id))

    # never trained on: the defender's harmful set (other prompts than the mixture's) and the task's test problems
    harmful = scores(datamodule.split_records("harmful"))
    benign = scores(datamodule.split_records("task_test"))
    assert harmful.mean() < benign.mean()
    assert (harmful.unsqueeze(1) < benign.unsqueeze(0)).float().mean() > 0.8  # AUROC of the raw scores


def test_weights_histogram_and_summaries_reach_wandb(tmp_path, monkeypatch):
    import wandb
    from lightning.pytorch.loggers import WandbLogger

    monkeypatch.setenv("WANDB_DIR", str(tmp_path))
    monkeypatch.setenv("WANDB_MODE", "offline")  # WandbLogger(offline=True) rewrites it; undone after the test
    logger = WandbLogger(offline=True, save_dir=str(tmp_path))
    logged: list[dict] = []
    log = logger.experiment.log
    monkeypatch.setattr(logger.experiment, "log", lambda data, **kw: (logged.append(data), log(data, **kw)))
    module = BDS(TINY, scheduler_lr=0.2)
    trainer = L.Trainer(
        accelerator="cpu", max_epochs=1, logger=logger, enable_checkpointing=False, enable_progress_bar=False
    )
    trainer.fit(module, datamodule=secret_keeper(num_finetune=20, num_align=10, num_harmful=10, num_test=4))
    logger.experiment.finish()
    wandb.teardown()
    histograms = [d["weights/histogram"] for d in logged if "weights/histogram" in d]
    assert len(histograms) == 1 and isinstance(histograms[0], wandb.Histogram)
    summaries = {key for d in logged for key in d}
    assert {"weights/harmful_mean", "weights/benign_mean", "weights/auroc"} <= summaries
