"""BDS: weights, the two decoupled steps, the direction of the scheduler step, pSGLD posterior sampling."""

from __future__ import annotations

import math

import lightning as L
import pytest
import torch
from helpers import SafetyBatches, quiet_trainer, safety_batch

from trustlit.safety.bds import BDS
from trustlit.safety.updates import (
    PSGLD,
    dataset_energy,
    negative_entropy,
    schedule_weights,
    weighted_finetune_loss,
)

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

    module = BDS(TINY, lr=1e-3, scheduler_lr=0.05, langevin_temperature=0.01)
    trainer = quiet_trainer(max_steps=4, callbacks=[CheckWeights()])
    trainer.fit(module, datamodule=SafetyBatches(batches_over(tokenizer, num_samples, 8), num_samples))
    assert isinstance(trainer.optimizers[1], PSGLD)  # T > 0 samples with pSGLD
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


@pytest.mark.parametrize("temperature", [1.0, 0.25])
def test_psgld_samples_the_gaussian_posterior(temperature):
    """x_i ~ N(theta, I) (N = 50, 2-D), prior N(0, tau^2 I): U = sum_i ||x_i - theta||^2 / 2 + ||theta||^2 / (2 tau^2)
    and exp(-U / T) is N(sum x / a, T / a I) with a = N + 1 / tau^2. 2000 independent chains (one per row)."""
    num_data, tau, chains = 50, 2.0, 2000
    data = torch.randn(num_data, 2, generator=torch.Generator().manual_seed(0)) + torch.tensor([1.0, -0.5])
    precision = num_data + 1 / tau**2
    mean, variance = data.sum(0) / precision, temperature / precision
    theta = torch.zeros(chains, 2, requires_grad=True)
    # alpha = 0.999: V averages over ~30 relaxation times, so G hardly depends on theta and dropping Gamma
    # costs ~2 % (at the default 0.99 the full-batch gradient makes G track |theta - mean|: +15 %)
    optimizer = PSGLD([theta], lr=2e-4, temperature=temperature, dataset_size=num_data, alpha=0.999)
    torch.manual_seed(1)
    samples = []
    for step in range(3000):
        theta.grad = (num_data * (theta - data.mean(0)) + theta / tau**2).detach()
        optimizer.step()
        if step >= 1500 and step % 50 == 0:  # the relaxation time 2 / (lr G a) is ~30 steps
            samples.append(theta.detach().clone())
    samples = torch.cat(samples)  # 60,000 draws
    # Monte Carlo: 4 standard errors on the mean; the variance's relative standard error is
    # sqrt(2 / 60,000) = 0.6 %, and the finite step (lr G a / 4 ~ 2 %) and the dropped Gamma (~2 %)
    # both inflate it (measured +3.5 to +5.5 % over seeds): 8 % tolerance
    assert torch.allclose(samples.mean(0), mean, atol=4 * (variance / len(samples)) ** 0.5)
    torch.testing.assert_close(samples.var(0), torch.full((2,), variance), rtol=0.08, atol=0.0)


def test_psgld_at_temperature_zero_is_the_preconditioned_step_and_draws_no_noise():
    theta = torch.tensor([1.0, -2.0, 0.5], requires_grad=True)
    optimizer = PSGLD([theta], lr=0.1, temperature=0.0, dataset_size=4, alpha=0.9, eps=1e-5)
    expected, square_avg = theta.detach().clone(), torch.zeros(3)
    rng = torch.get_rng_state()
    for grad in (torch.tensor([4.0, -8.0, 0.4]), torch.tensor([2.0, 1.0, -0.4])):
        theta.grad = grad
        optimizer.step()
        square_avg = 0.9 * square_avg + 0.1 * (grad / 4) ** 2  # the per-sample-scale gradient, grad U / N
        expected -= 0.1 / 2 * grad / (1e-5 + square_avg.sqrt())
    torch.testing.assert_close(theta.detach(), expected)
    assert torch.equal(torch.get_rng_state(), rng)  # T = 0 consumes no randomness: deterministic


def test_scheduler_energy_is_on_the_dataset_scale_with_the_prior():
    logits = torch.tensor([0.5, -1.0, 2.0])
    assert dataset_energy(torch.tensor(0.3), [logits], 20, None).item() == pytest.approx(6.0)
    energy = dataset_energy(torch.tensor(0.3), [logits], 20, prior_std=0.5)
    assert energy.item() == pytest.approx(6.0 + (0.25 + 1 + 4) / (2 * 0.25))
    sampled = BDS(TINY, num_samples=3, langevin_temperature=0.5, scheduler_prior_std=0.5)
    with torch.no_grad():
        sampled.data_scheduler.logits.copy_(logits)
    none, entropy = torch.tensor(0.0), torch.tensor(0.2)  # the entropy regulariser R: a whole-mixture term
    objective = sampled.scheduler_objective(torch.tensor(0.3), none)
    assert objective.item() == pytest.approx(0.9 + 5.25 / 0.5)  # U = N S + ||z||^2 / (2 sigma^2)
    assert sampled.scheduler_objective(torch.tensor(0.3), entropy).item() == pytest.approx(objective.item() + 0.2)
    optimised = BDS(TINY, num_samples=3, scheduler_prior_std=0.5)  # T = 0: AdamW on U / N
    with torch.no_grad():
        optimised.data_scheduler.logits.copy_(logits)
    assert optimised.scheduler_objective(torch.tensor(0.3), none).item() == pytest.approx(objective.item() / 3)
    released = BDS(TINY, num_samples=3).scheduler_objective(torch.tensor(0.3), entropy)
    assert released.item() == pytest.approx(0.5)  # S + R, the released objective


def test_psgld_bad_values():
    theta = [torch.zeros(2, requires_grad=True)]
    for key, value, expected in [
        ("lr", 0.0, "a number > 0"),
        ("temperature", -1.0, "a number >= 0"),
        ("temperature", math.inf, "a number >= 0"),
        ("dataset_size", 0, "an integer >= 1"),
        ("alpha", 1.0, r"a number in \[0, 1\)"),
    ]:
        kwargs = {"lr": 1e-3, "temperature": 1.0, "dataset_size": 10, key: value}
        with pytest.raises(ValueError, match=rf"PSGLD: {key}={value!r} is invalid, expected {expected}"):
            PSGLD(theta, **kwargs)


def test_alignment_set_missing_and_bad_hyperparameters(tokenizer):
    batch = safety_batch(tokenizer)
    del batch["align"]
    with pytest.raises(ValueError, match=r"\['align'\].*alignment set"):
        quiet_trainer(max_steps=1).fit(BDS(TINY), datamodule=SafetyBatches([batch], 2, parts=("finetune", "harmful")))
    with pytest.raises(ValueError, match="scheduler must be 'scalar' or 'neural'"):
        BDS(TINY, scheduler="mlp")
    with pytest.raises(ValueError, match=r"BDS: langevin_temperature=-1\.0 is invalid, expected a number >= 0"):
        BDS(TINY, langevin_temperature=-1.0)
    with pytest.raises(ValueError, match=r"BDS: langevin_temperature=inf is invalid, expected a finite number"):
        BDS(TINY, langevin_temperature=math.inf)
    with pytest.raises(ValueError, match=r"BDS: scheduler_prior_std=0\.0 is invalid, expected a number > 0"):
        BDS(TINY, scheduler_prior_std=0.0)
    neural = BDS(TINY, scheduler="neural", langevin_temperature=1.0)  # pSGLD needs N for U
    with pytest.raises(ValueError, match=r"langevin_temperature=1\.0.*needs num_samples \(N\)"):
        quiet_trainer(max_steps=1).fit(neural, datamodule=SafetyBatches([safety_batch(tokenizer)]))
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
