"""Panacea: the perturbation, the assembled update, the final w_T + eps_T (closed forms, tiny models)."""

from __future__ import annotations

import lightning as L
import pytest
import torch
from helpers import SafetyBatches, quiet_trainer, safety_batch
from torch import nn

from trustlit.safety.panacea import ApplyPanaceaPerturbation, Panacea, panacea_step
from trustlit.safety.updates import global_norm

TINY = {"name_or_path": "tiny-llama", "tiny": {"hidden_size": 32, "num_layers": 2, "num_heads": 2}}


def quadratic(seed: int = 0, scale: float = 1.0):
    """w, g(w) = 1/2 ||w - c||^2 and h(w) = 1/2 ||A w - b||^2 on hand-made tensors."""
    generator = torch.Generator().manual_seed(seed)
    w = nn.Parameter(torch.randn(5, generator=generator))
    c = torch.randn(5, generator=generator)
    a = torch.randn(4, 5, generator=generator)
    b = scale * torch.randn(4, generator=generator)
    return w, c, a, b, (lambda: 0.5 * ((w - c) ** 2).sum()), (lambda: 0.5 * ((a @ w - b) ** 2).sum())


def test_update_on_a_quadratic_is_the_closed_form():
    w, c, a, b, g, h = quadratic()
    rho, lam = 0.3, 0.7
    step = panacea_step([w], g, h, rho, lam, clamp=1e9)
    harmful_grad = a.T @ (a @ w.detach() - b)
    eps = rho * harmful_grad / (harmful_grad.norm() + 1e-7)
    torch.testing.assert_close(step.perturbation[0], eps)
    # He - Hw = A^T A eps, so the update is grad g - lambda * A^T A eps
    torch.testing.assert_close(step.update[0], (w.detach() - c) - lam * a.T @ a @ eps)


def test_clamp_stops_the_harmful_gradient_above_c():
    w, c, a, b, g, h = quadratic(scale=50.0)
    assert h().item() > 5
    step = panacea_step([w], g, h, rho=0.1, lam=0.5, clamp=5.0)
    assert step.perturbed_harmful_loss.item() > 5
    # He = 0: the update is grad g + lambda * Hw
    harmful_grad = a.T @ (a @ w.detach() - b)
    torch.testing.assert_close(step.update[0], (w.detach() - c) + 0.5 * harmful_grad)


def test_perturbation_norm_direction_and_weights_restored(tokenizer):
    module = Panacea(TINY, rho=0.37)
    module.model.get_input_embeddings().requires_grad_(False)
    params = module.trainable_parameters()
    before = [p.detach().clone() for p in module.model.parameters()]
    batch = safety_batch(tokenizer)
    from trustlit.llm.scoring import answer_nll

    step = panacea_step(
        params,
        lambda: answer_nll(module.model, batch["finetune"]),
        lambda: answer_nll(module.model, batch["harmful"]),
        0.37,
        1e-3,
    )
    assert len(step.perturbation) == len(params)
    assert global_norm(step.perturbation).item() == pytest.approx(0.37, abs=1e-5)
    harmful_grad = torch.autograd.grad(answer_nll(module.model, batch["harmful"]), params)
    flat_eps = torch.cat([e.flatten() for e in step.perturbation])
    flat_grad = torch.cat([g.flatten() for g in harmful_grad])
    assert torch.nn.functional.cosine_similarity(flat_eps, flat_grad, dim=0).item() == pytest.approx(1.0, abs=1e-5)
    assert all(e.data_ptr() != p.data_ptr() for e, p in zip(step.perturbation, params, strict=True))
    assert all(torch.equal(b, p) for b, p in zip(before, module.model.parameters(), strict=True))


class RecordLastStep(L.Callback):
    """Keeps the weights and eps after the last training step, before train end."""

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx) -> None:
        self.weights = [p.detach().clone() for p in module.trainable_parameters()]
        self.perturbation = [e.clone() for e in module.perturbation]


def test_zero_lr_step_leaves_weights_bit_identical(tokenizer):
    class ZeroLR(L.Callback):
        def on_train_start(self, trainer, module) -> None:
            for group in trainer.optimizers[0].param_groups:
                group["lr"] = 0.0
            trainer.lr_scheduler_configs[0].scheduler.base_lrs = [0.0] * len(trainer.optimizers[0].param_groups)

    module = Panacea(TINY, rho=1.0, lam=0.5)
    before = [p.detach().clone() for p in module.model.parameters()]
    quiet_trainer(max_steps=2, callbacks=[ZeroLR()]).fit(
        module, datamodule=SafetyBatches([safety_batch(tokenizer)] * 2)
    )
    assert module.perturbation is not None
    assert all(torch.equal(b, p) for b, p in zip(before, module.model.parameters(), strict=True))


def test_lambda_zero_is_sft(tokenizer):
    from trustlit.safety.baselines import SFT

    batches = [safety_batch(tokenizer)] * 3
    results = []
    for module in (Panacea(TINY, lam=0.0, lr=1e-3), SFT(TINY, lr=1e-3)):
        L.seed_everything(0)
        quiet_trainer(max_steps=3).fit(module, datamodule=SafetyBatches(batches))
        results.append([p.detach() for p in module.model.parameters()])
    assert all(torch.equal(a, b) for a, b in zip(*results, strict=True))


def test_final_model_is_last_weights_plus_last_eps(tokenizer, tmp_path):
    module = Panacea(TINY, rho=0.5, lr=1e-3)
    module.model.get_input_embeddings().requires_grad_(False)
    frozen = module.model.get_input_embeddings().weight.detach().clone()
    record = RecordLastStep()
    trainer = L.Trainer(
        accelerator="cpu",
        max_steps=3,
        default_root_dir=tmp_path,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[record, ApplyPanaceaPerturbation(), L.pytorch.callbacks.ModelCheckpoint(dirpath=tmp_path)],
    )
    trainer.fit(module, datamodule=SafetyBatches([safety_batch(tokenizer)] * 3))
    final = module.trainable_parameters()
    for p, w, e in zip(final, record.weights, record.perturbation, strict=True):
        torch.testing.assert_close(p.detach(), w + e, rtol=0, atol=0)
    assert torch.equal(module.model.get_input_embeddings().weight, frozen)  # frozen weights get no eps
    saved = torch.load(tmp_path / "perturbed.ckpt", weights_only=False)
    assert saved["panacea_perturbation"]["applied"] is True
    with pytest.raises(RuntimeError, match="already applied"):
        module.apply_perturbation()


def test_missing_harmful_set_and_bad_hyperparameters(tokenizer):
    batch = safety_batch(tokenizer)
    del batch["harmful"]
    with pytest.raises(ValueError, match=r"'harmful'.*separate harmful set"):
        quiet_trainer(max_steps=1).fit(Panacea(TINY), datamodule=SafetyBatches([batch], parts=("finetune", "align")))
    with pytest.raises(ValueError, match=r"Panacea: rho=-1\.0 is invalid, expected a number >= 0"):
        Panacea(TINY, rho=-1.0)
    with pytest.raises(ValueError, match=r"Panacea: harmful_clamp=0\.0 is invalid, expected a number > 0"):
        Panacea(TINY, harmful_clamp=0.0)
