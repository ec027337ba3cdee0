from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import lightning as L
import pytest
import torch
import torch.nn.functional as F
from opacus.accountants import create_accountant
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from trustlit.classifiers import MLPClassifier
from trustlit.privacy import DPSGD

REPO_ROOT = Path(__file__).resolve().parents[1]
NUM_FEATURES, NUM_CLASSES = 5, 3


def dataset(n: int = 24, seed: int = 0) -> TensorDataset:
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(n, NUM_FEATURES, generator=generator)
    y = torch.randint(0, NUM_CLASSES, (n,), generator=generator)
    return TensorDataset(x, y, torch.arange(n))


class Data(L.LightningDataModule):
    def __init__(self, n: int = 24, batch_size: int = 8) -> None:
        super().__init__()
        self.data, self.batch_size = dataset(n), batch_size

    def train_dataloader(self) -> DataLoader:
        return DataLoader(self.data, batch_size=self.batch_size, shuffle=False)


class PlainClassifier(L.LightningModule):
    """Any LightningModule: no trustlit base class, loss written in training_step."""

    def __init__(self, weight_decay: float = 0.0) -> None:
        super().__init__()
        self.linear = nn.Linear(NUM_FEATURES, NUM_CLASSES)
        self.weight_decay = weight_decay
        self.batches: list[tuple[torch.Tensor, torch.Tensor]] = []

    def regularizer(self) -> torch.Tensor:
        return self.weight_decay * self.linear.weight.pow(2).sum()

    def training_step(self, batch, batch_idx):
        x, y, _ = batch
        self.batches.append((x.clone(), y.clone()))
        return F.cross_entropy(self.linear(x), y) + self.regularizer()

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=1.0)


def clipped_mean_gradient(linear: nn.Linear, x, y, max_grad_norm: float, divisor: float) -> list[torch.Tensor]:
    """sum_i clip_C(grad l_i) / divisor, per-sample gradients computed one sample at a time."""
    total = [torch.zeros_like(linear.weight), torch.zeros_like(linear.bias)]
    for xi, yi in zip(x, y, strict=True):
        grads = torch.autograd.grad(F.cross_entropy(linear(xi[None]), yi[None]), [linear.weight, linear.bias])
        norm = torch.sqrt(sum(g.pow(2).sum() for g in grads))
        factor = min(1.0, max_grad_norm / (norm.item() + 1e-6))
        total = [t + factor * g for t, g in zip(total, grads, strict=True)]
    return [t / divisor for t in total]


def trainer(callback: DPSGD, *more_callbacks: L.Callback, **kwargs) -> L.Trainer:
    defaults = dict(
        accelerator="cpu",
        devices=1,
        max_steps=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    return L.Trainer(callbacks=[callback, *more_callbacks], **{**defaults, **kwargs})


def one_step_update(module: L.LightningModule, callback: DPSGD) -> list[torch.Tensor]:
    before = [p.detach().clone() for p in module.parameters()]
    trainer(callback).fit(module, Data())
    return [b - p.detach() for b, p in zip(before, module.parameters(), strict=True)]


def test_a_step_without_noise_is_the_mean_of_clipped_per_sample_gradients():
    torch.manual_seed(0)
    module = PlainClassifier()
    reference = nn.Linear(NUM_FEATURES, NUM_CLASSES)
    reference.load_state_dict(module.linear.state_dict())
    update = one_step_update(module, DPSGD(noise_multiplier=0.0, max_grad_norm=0.05, poisson_sampling=False))
    x, y = module.batches[0]
    expected = clipped_mean_gradient(reference, x, y, max_grad_norm=0.05, divisor=len(x))
    unclipped = torch.autograd.grad(F.cross_entropy(reference(x), y), [reference.weight, reference.bias])
    for got, want, plain in zip(update, expected, unclipped, strict=True):  # lr = 1: update = gradient
        assert torch.allclose(got, want, atol=1e-6)
        assert not torch.allclose(got, plain, atol=1e-3), "clipping at 0.05 must change the gradient"


def test_a_regulariser_reaches_the_privatised_update():
    torch.manual_seed(0)
    module = PlainClassifier(weight_decay=0.3)
    reference = nn.Linear(NUM_FEATURES, NUM_CLASSES)
    reference.load_state_dict(module.linear.state_dict())
    update = one_step_update(module, DPSGD(noise_multiplier=0.0, max_grad_norm=0.05, poisson_sampling=False))
    x, y = module.batches[0]
    expected = clipped_mean_gradient(reference, x, y, max_grad_norm=0.05, divisor=len(x))
    expected[0] = expected[0] + 2 * 0.3 * reference.weight.detach()  # d/dW of 0.3 * ||W||^2
    assert torch.allclose(update[0], expected[0], atol=1e-6)
    assert torch.allclose(update[1], expected[1], atol=1e-6)


def test_noise_has_the_calibrated_scale():
    torch.manual_seed(0)
    module = PlainClassifier()
    reference = nn.Linear(NUM_FEATURES, NUM_CLASSES)
    reference.load_state_dict(module.linear.state_dict())
    sigma, clip, batch = 2.0, 0.5, 8
    update = one_step_update(module, DPSGD(noise_multiplier=sigma, max_grad_norm=clip, poisson_sampling=False))
    x, y = module.batches[0]
    expected = clipped_mean_gradient(reference, x, y, clip, batch)
    noise = torch.cat([(u - e).flatten() for u, e in zip(update, expected, strict=True)])
    # noise / B ~ N(0, (sigma C / B)^2) on each of the 18 coordinates
    assert noise.std().item() == pytest.approx(sigma * clip / batch, rel=0.45)


class LeakyClassifier(PlainClassifier):
    """Uses a parameter outside any layer: Opacus cannot privatise its gradient."""

    def __init__(self) -> None:
        super().__init__()
        self.temperature = nn.Parameter(torch.ones(()))

    def training_step(self, batch, batch_idx):
        x, y, _ = batch
        return F.cross_entropy(self.linear(x) * self.temperature, y)


def test_a_gradient_without_per_sample_gradients_stops_the_run():
    with pytest.raises(RuntimeError, match="no per-sample gradient for \\['temperature'"):
        trainer(DPSGD(noise_multiplier=1.0)).fit(LeakyClassifier(), Data())


class BatchNormClassifier(PlainClassifier):
    def __init__(self) -> None:
        super().__init__()
        self.norm = nn.BatchNorm1d(NUM_FEATURES)


def test_unsupported_layers_are_refused_with_the_fix():
    with pytest.raises(ValueError, match=r"BatchNorm.*GroupNorm.*ModuleValidator\.fix"):
        trainer(DPSGD(noise_multiplier=1.0)).fit(BatchNormClassifier(), Data())


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"target_epsilon": 0.0}, r"DPSGD: target_epsilon=0\.0 is invalid, expected a number > 0"),
        ({"target_epsilon": -1.0}, r"DPSGD: target_epsilon=-1\.0 is invalid, expected a number > 0"),
        ({"noise_multiplier": 1.0, "target_delta": 1.0}, r"target_delta=1\.0 is invalid, expected a number in \(0, 1"),
        ({"noise_multiplier": 1.0, "target_delta": 0.0}, r"target_delta=0\.0 is invalid, expected a number in \(0, 1"),
        ({"noise_multiplier": 1.0, "max_grad_norm": 0.0}, r"max_grad_norm=0\.0 is invalid, expected a number > 0"),
        ({}, "exactly one of noise_multiplier and target_epsilon"),
        ({"noise_multiplier": 1.0, "target_epsilon": 1.0}, "exactly one of"),
        ({"noise_multiplier": 1.0, "accountant": "moments"}, "accountant='moments' is invalid, expected one of"),
        ({"noise_multiplier": 1.0, "grad_sample_mode": "ghost", "clipping": "per_layer"}, "flat"),
    ],
)
def test_bad_arguments_are_named(kwargs, message):
    with pytest.raises(ValueError, match=message):
        DPSGD(**kwargs)


def test_gradient_accumulation_is_refused():
    with pytest.raises(ValueError, match="accumulate_grad_batches"):
        trainer(DPSGD(noise_multiplier=1.0), accumulate_grad_batches=2).fit(PlainClassifier(), Data())


class Recorder(L.Callback):
    def __init__(self) -> None:
        self.epsilons: list[float] = []
        self.batch_sizes: list[int] = []

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        self.batch_sizes.append(len(batch[0]))

    def on_train_epoch_end(self, trainer, pl_module):
        self.epsilons.append(float(trainer.callback_metrics["dp/epsilon"]))


def test_logged_epsilon_equals_opacus_accounting_and_poisson_batches_can_be_empty():
    recorder = Recorder()
    callback = DPSGD(noise_multiplier=1.1, target_delta=1e-5, accountant="rdp")
    module = PlainClassifier()
    trainer(callback, recorder, max_steps=-1, max_epochs=3).fit(module, Data(n=24, batch_size=1))
    steps_per_epoch = 24  # sample rate 1/24
    assert len(recorder.batch_sizes) == 3 * steps_per_epoch
    assert 0 in recorder.batch_sizes, "at q = 1/24 some Poisson batches are empty (p ~ 0.36 each)"
    assert all(torch.isfinite(p).all() for p in module.parameters())
    for epoch, logged in enumerate(recorder.epsilons, start=1):
        accountant = create_accountant("rdp")
        accountant.history = [(1.1, 1 / 24, epoch * steps_per_epoch)]
        assert logged == pytest.approx(accountant.get_epsilon(1e-5), rel=1e-5)
    assert recorder.epsilons == sorted(recorder.epsilons)


def test_target_epsilon_is_met_and_not_exceeded():
    callback = DPSGD(target_epsilon=2.0, target_delta=1e-5)
    trainer(callback, max_steps=-1, max_epochs=2).fit(PlainClassifier(), Data(n=48, batch_size=8))
    assert 1.8 < callback.epsilon <= 2.0 + 1e-3
    assert callback.noise_multiplier > 0


def mlp_update(callback: DPSGD, batch_size: int = 8) -> tuple[list[torch.Tensor], int]:
    torch.manual_seed(0)
    module = MLPClassifier(num_features=NUM_FEATURES, num_classes=NUM_CLASSES, hidden_sizes=[4], lr=1.0)
    before = [p.detach().clone() for p in module.parameters()]
    run = trainer(callback)
    run.fit(module, Data(batch_size=batch_size))
    return [b - p.detach() for b, p in zip(before, module.parameters(), strict=True)], run.global_step


@pytest.mark.parametrize(
    "variant",
    [{"grad_sample_mode": "ghost"}, {"grad_sample_mode": "functorch"}, {"max_physical_batch_size": 3}],
    ids=["ghost", "functorch", "physical-batches-of-3"],
)
def test_every_mode_gives_the_hooks_update(variant):
    common = {"noise_multiplier": 0.0, "max_grad_norm": 0.01, "poisson_sampling": False}
    reference, _ = mlp_update(DPSGD(**common))
    update, global_step = mlp_update(DPSGD(**common, **variant))
    assert global_step == 1, "one logical step, however many physical chunks"
    for got, want in zip(update, reference, strict=True):
        assert torch.allclose(got, want, atol=1e-6)
    assert any(r.abs().sum() > 0 for r in reference)


def test_ghost_clipping_needs_a_per_sample_loss_module():
    with pytest.raises(TypeError, match="PerSampleLossModule"):
        trainer(DPSGD(noise_multiplier=1.0, grad_sample_mode="ghost")).fit(PlainClassifier(), Data())


def test_resume_continues_the_accounting(tmp_path):
    def fit(max_epochs: int, root: Path, ckpt_path: str | None = None) -> DPSGD:
        torch.manual_seed(0)
        callback = DPSGD(noise_multiplier=1.0, accountant="rdp")
        checkpoint = L.pytorch.callbacks.ModelCheckpoint(dirpath=root, save_last=True)
        run = trainer(callback, checkpoint, max_steps=-1, max_epochs=max_epochs, enable_checkpointing=True)
        run.fit(PlainClassifier(), Data(), ckpt_path=ckpt_path)
        return callback

    fit(1, tmp_path / "a")
    resumed = fit(2, tmp_path / "a", ckpt_path=str(tmp_path / "a" / "last.ckpt"))
    straight = fit(2, tmp_path / "b")
    assert resumed.accountant.history == [(1.0, 1 / 3, 6)]  # 3 steps before the checkpoint, 3 after
    assert resumed.epsilon == pytest.approx(straight.epsilon, rel=1e-9)
    saved = torch.load(tmp_path / "a" / "last.ckpt", weights_only=False)["callbacks"]
    assert any(state.get("history") for state in saved.values())


class ExplicitPlainClassifier(PlainClassifier):
    def train_dataloader(self) -> DataLoader:
        return Data().train_dataloader()


def test_the_callback_leaves_the_module_as_it_found_it():
    module = ExplicitPlainClassifier()
    trainer(DPSGD(noise_multiplier=1.0)).fit(module)
    assert "train_dataloader" not in vars(module)
    assert not any(hasattr(m, "activations") and m.activations for m in module.modules())
    x = torch.randn(4, NUM_FEATURES)
    module.linear(x).sum().backward()
    assert getattr(module.linear.weight, "grad_sample", None) is None, "hooks must be removed after fit"


def run_ddp(out: Path, mode: str) -> list[dict]:
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    subprocess.run(
        [sys.executable, str(REPO_ROOT / "tests" / "ddp_dpsgd.py"), str(out), mode],
        check=True,
        env=env,
        cwd=out,
        timeout=300,
    )
    return [json.loads((out / f"rank{r}.json").read_text()) for r in (0, 1)]


@pytest.mark.slow
def test_ddp_on_two_processes_keeps_ranks_in_sync_and_accounts_like_one(tmp_path):
    ranks = run_ddp(tmp_path, "train")
    assert ranks[0]["params"] == ranks[1]["params"]
    assert ranks[0]["initial"] != ranks[0]["params"], "training must move the parameters"
    assert ranks[0]["steps"] == ranks[1]["steps"] == 2 * 6, "every rank takes every step, empty batches included"
    seen = [i for rank in ranks for batch in rank["seen"][:6] for i in batch]
    assert not set(ranks[0]["seen"][0]) & set(ranks[1]["seen"][0]), "ranks sample disjoint shards"
    assert 10 < len(seen) < 90, "6 Poisson steps at q = 1/6 over 48 samples draw about 48"
    accountant = create_accountant("rdp")
    accountant.history = [(1.0, ranks[0]["sample_rate"], ranks[0]["steps"])]
    assert ranks[0]["epsilon"] == pytest.approx(accountant.get_epsilon(1e-5), rel=1e-6)
    assert ranks[0]["epsilon"] == ranks[1]["epsilon"]
    assert ranks[0]["sample_rate"] == pytest.approx(8 / 48)


@pytest.mark.slow
def test_a_ddp_step_averages_the_clipped_gradients_of_both_ranks_once(tmp_path):
    ranks = run_ddp(tmp_path, "exact")
    x, y, _ = dataset(48).tensors  # the script's data: drawn the same way
    linear = nn.Linear(NUM_FEATURES, NUM_CLASSES)
    weight, bias = ranks[0]["initial"]
    linear.weight.data = torch.tensor(weight).view(NUM_CLASSES, NUM_FEATURES)
    linear.bias.data = torch.tensor(bias)
    indices = [i for rank in ranks for i in rank["seen"][0]]
    expected = clipped_mean_gradient(linear, x[indices], y[indices], max_grad_norm=0.1, divisor=8)  # q * N = 8
    for got, start, want in zip(ranks[0]["params"], ranks[0]["initial"], expected, strict=True):
        update = torch.tensor(start) - torch.tensor(got)
        assert torch.allclose(update, want.flatten(), atol=1e-6)
    assert ranks[0]["params"] == ranks[1]["params"]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"poisson_sampling": False}, "needs poisson_sampling=True"),
        ({"max_physical_batch_size": 2}, "max_physical_batch_size under DDP"),
    ],
)
def test_ddp_refuses_what_would_break_the_guarantee_or_the_collectives(kwargs, message):
    ddp = L.Trainer(accelerator="cpu", devices=2, strategy="ddp", use_distributed_sampler=False, logger=False)
    with pytest.raises(ValueError, match=message):
        DPSGD(noise_multiplier=1.0, **kwargs)._check_trainer(ddp)
    with_sampler = L.Trainer(accelerator="cpu", devices=2, strategy="ddp", logger=False)
    with pytest.raises(ValueError, match="use_distributed_sampler=False"):
        DPSGD(noise_multiplier=1.0)._check_trainer(with_sampler)


def test_lightning_gradient_clipping_is_refused():
    with pytest.raises(ValueError, match="gradient_clip_val"):
        trainer(DPSGD(noise_multiplier=1.0), gradient_clip_val=1.0).fit(PlainClassifier(), Data())


class ScheduledMLP(MLPClassifier):
    def configure_optimizers(self):
        optimizer = torch.optim.SGD(self.parameters(), lr=1.0)
        return {"optimizer": optimizer, "lr_scheduler": torch.optim.lr_scheduler.StepLR(optimizer, 1, gamma=0.5)}


@pytest.mark.parametrize("variant", [{}, {"grad_sample_mode": "ghost"}, {"max_physical_batch_size": 3}])
def test_learning_rate_schedules_step_in_every_mode(variant):
    module = ScheduledMLP(num_features=NUM_FEATURES, num_classes=NUM_CLASSES, hidden_sizes=[4])
    run = trainer(DPSGD(noise_multiplier=1.0, **variant), max_steps=-1, max_epochs=3)
    run.fit(module, Data(n=24, batch_size=8))
    assert run.global_step == 9
    assert run.optimizers[0].param_groups[0]["lr"] == pytest.approx(0.5**3)  # stepped once per epoch


def test_a_failed_fit_is_cleaned_up_and_the_next_fit_is_not_private_by_accident():
    data = Data()
    with pytest.raises(RuntimeError, match="temperature"):
        trainer(DPSGD(noise_multiplier=1.0)).fit(LeakyClassifier(), data)
    assert "train_dataloader" not in vars(data), "the Poisson loader must not outlive the failed fit"
    module = PlainClassifier()
    trainer(DPSGD(noise_multiplier=1.0)).fit(module, data)  # hooks were removed: attaching again works


def test_fitting_twice_with_one_callback_starts_a_new_accounting():
    callback = DPSGD(target_epsilon=2.0, target_delta=1e-5)
    for _ in range(2):
        trainer(callback, max_steps=-1, max_epochs=2).fit(PlainClassifier(), Data(n=48, batch_size=8))
        assert callback.epsilon <= 2.0 + 1e-3


def test_resuming_beyond_the_calibrated_budget_is_refused(tmp_path):
    def fit(max_epochs: int, ckpt_path: str | None = None) -> None:
        callback = DPSGD(target_epsilon=2.0, target_delta=1e-5, accountant="rdp")
        checkpoint = L.pytorch.callbacks.ModelCheckpoint(dirpath=tmp_path, save_last=True)
        run = trainer(callback, checkpoint, max_steps=-1, max_epochs=max_epochs, enable_checkpointing=True)
        run.fit(PlainClassifier(), Data(n=48, batch_size=8), ckpt_path=ckpt_path)

    fit(2)
    with pytest.raises(ValueError, match=r"would spend epsilon=.* > target_epsilon=2\.0"):
        fit(6, ckpt_path=str(tmp_path / "last.ckpt"))
