"""DP-SGD for any LightningModule, through Opacus, as a Lightning Callback.

DP-SGD (Abadi et al., CCS 2016) replaces the mini-batch gradient by

    g = (1 / B) * ( sum_{i in batch} clip_C(grad l_i(theta)) + N(0, sigma^2 C^2 I) ),
    clip_C(v) = v * min(1, C / ||v||_2),

with batches drawn by Poisson sampling at rate q = B / N, and accounts the privacy spent over
the steps with a privacy accountant (PRV by default). Symbols in the code: ``C`` is
``max_grad_norm``, ``sigma`` is ``noise_multiplier``, ``q`` is ``sample_rate``, ``B`` the
expected batch size. Opacus computes the per-sample gradients; this callback attaches it to a
Lightning run:

- **Per-sample gradients on the real model.** Opacus's hooks are attached to the
  LightningModule itself (``wrap_model=False``), so whatever ``training_step`` calls runs
  through them; before every optimiser step the callback checks that every trainable parameter
  got per-sample gradients, and stops the run if one did not (its gradient would otherwise be
  used without clipping or noise).
- **Poisson sampling.** The DataModule's (or module's) ``train_dataloader`` is replaced by a
  Poisson loader over the same dataset and collate function (Opacus's samplers), with as many
  steps per epoch as the original loader; an empty batch still takes a step (noise only), as
  the analysis assumes, on every rank (Opacus's distributed sampler would skip it on one rank
  and desynchronise DDP). Data passed to ``trainer.fit(train_dataloaders=...)`` cannot be
  replaced: give a DataModule or a module ``train_dataloader``.
- **Regularisers.** Opacus overwrites ``p.grad`` with the privatised gradient, so a loss term
  that does not depend on the data (weight decay, an L2 penalty) would be silently dropped.
  A module that defines ``regularizer() -> Tensor`` gets the gradient of that term added to the
  privatised gradient after clipping and noise (it needs no privacy: it reads no data).
  :class:`PerSampleLossModule` adds ``regularizer()`` to its loss itself, so the same module
  trains identically without the callback.
- **Ghost clipping** (``grad_sample_mode="ghost"``) needs two backward passes per step, so
  it runs with manual optimisation: modules opt in by deriving from
  :class:`PerSampleLossModule`, whose ``training_step`` hands the step to the callback (which
  then also steps the LR schedulers, as Lightning's automatic loop would).
- **Physical batches** (``max_physical_batch_size``): a Poisson batch is split into chunks
  whose clipped gradients are accumulated before one noisy step, so accounting and
  ``trainer.global_step`` count logical steps. Also for :class:`PerSampleLossModule` only.
- **DDP.** ``DistributedDPOptimizer`` adds the noise once (rank 0) before the gradient
  all-reduce, and every rank draws its own Poisson sample, at the global rate, from its shard
  of the data. Needs ``Trainer(use_distributed_sampler=False)`` and Poisson sampling.
- **Accounting.** ``dp/epsilon`` and ``dp/delta`` are logged every epoch; the accountant's
  history is saved in the checkpoint and restored on resume, so epsilon keeps growing. With
  ``target_epsilon``, the noise calibrated for the first run is kept on resume, and resuming
  for longer than that budget allows is an error.

Refused with a clear error: gradient accumulation (use a larger batch), Lightning's
``gradient_clip_val`` (Opacus overwrites the clipped gradient; ``max_grad_norm`` clips),
16-bit mixed precision (the loss scale would inflate every per-sample gradient before
clipping), strategies other than single-device and DDP (FSDP and ModelParallelStrategy shard
the layers Opacus hooks, DeepSpeed owns the optimiser step), more than one optimiser, and layers
Opacus cannot privatise (BatchNorm: use GroupNorm or ``opacus.validators.ModuleValidator.fix``).
A failed fit is cleaned up like a finished one (hooks removed, data loader restored).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any, Literal

import lightning as L
import torch
from lightning.pytorch.strategies import DDPStrategy
from opacus.accountants import create_accountant
from opacus.accountants.utils import get_noise_multiplier
from opacus.data_loader import DPDataLoader
from opacus.grad_sample.utils import prepare_module
from opacus.optimizers import DPOptimizer, get_optimizer_class
from opacus.utils.uniform_sampler import DistributedUniformWithReplacementSampler, UniformWithReplacementSampler
from opacus.validators import ModuleValidator
from torch.utils.data import DataLoader

from trustlit.strategies import DDP, SINGLE_DEVICE, is_supported

# class names of the Lightning strategies DPSGD runs under (subclasses too, except DeepSpeed)
DPSGD_STRATEGIES = (SINGLE_DEVICE, DDP)

Accountant = Literal["prv", "rdp", "gdp"]
Clipping = Literal["flat", "per_layer"]
GradSampleMode = Literal["hooks", "functorch", "ghost"]


class PerSampleLossModule(L.LightningModule, ABC):
    """A LightningModule defined by its per-sample losses, so DP-SGD can run any of its modes.

    Subclasses implement :meth:`per_sample_losses` (one unreduced loss per sample, computed
    through the module's own layers) and may override :meth:`regularizer` (data-independent).
    The training loss is mean(per_sample_losses) + regularizer(). Under :class:`DPSGD` with
    ghost clipping or physical batches, ``training_step`` hands the step to the callback.
    """

    dp_manual_step: Callable[[Any], torch.Tensor] | None = None

    @abstractmethod
    def per_sample_losses(self, batch: Any) -> torch.Tensor:
        """Loss of every sample of ``batch``, shape [B]."""

    def regularizer(self) -> torch.Tensor:
        """A data-independent penalty added to the loss (0 by default)."""
        return torch.zeros((), device=self.device)

    @property
    def automatic_optimization(self) -> bool:
        """False while DPSGD runs the step itself (ghost clipping, physical batches)."""
        return self.dp_manual_step is None and self._automatic_optimization

    @automatic_optimization.setter
    def automatic_optimization(self, value: bool) -> None:
        self._automatic_optimization = value

    def setup(self, stage: str) -> None:
        """Subclasses that override ``setup`` call ``super().setup(stage)``."""
        self.dp_manual_step = None  # a new fit starts automatic; DPSGD switches it in on_fit_start

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor | None:
        if self.dp_manual_step is not None:
            return self.dp_manual_step(batch)
        losses = self.per_sample_losses(batch)
        loss = mean_or_zero(losses) + self.regularizer()
        self.log("train/loss", loss, prog_bar=True, batch_size=max(1, losses.numel()))
        return loss


def mean_or_zero(losses: torch.Tensor) -> torch.Tensor:
    """The mean of per-sample losses; 0 (with a gradient path) for an empty Poisson batch."""
    return losses.sum() / max(1, losses.numel())


def validate_privatisable(module: torch.nn.Module) -> None:
    """Raise if Opacus cannot compute per-sample gradients for a layer of ``module``."""
    errors = ModuleValidator.validate(module, strict=False)
    if errors:
        details = "; ".join(str(e) for e in errors)
        raise ValueError(
            f"DPSGD cannot privatise {type(module).__name__}: {details}. Replace BatchNorm by GroupNorm "
            "(or LayerNorm), or convert the model with opacus.validators.ModuleValidator.fix(model)"
        )


def _split_batch(batch: Any, size: int) -> list[Any]:
    """Chunks of at most ``size`` samples of a tensor, a tuple/list of tensors or a dict of tensors."""
    if isinstance(batch, torch.Tensor):
        return list(batch.split(size)) if len(batch) else [batch]
    if isinstance(batch, dict):
        parts = {k: _split_batch(v, size) for k, v in batch.items()}
        return [dict(zip(parts, chunk, strict=True)) for chunk in zip(*parts.values(), strict=True)]
    if isinstance(batch, list | tuple) and any(isinstance(v, torch.Tensor | dict | list | tuple) for v in batch):
        parts = [_split_batch(v, size) for v in batch]
        return [type(batch)(chunk) for chunk in zip(*parts, strict=True)]
    raise TypeError(f"max_physical_batch_size cannot split a batch of type {type(batch).__name__}")


class EveryStepDistributedSampler(DistributedUniformWithReplacementSampler):
    """Opacus's distributed Poisson sampler, but yielding empty batches instead of skipping them.

    Every rank must take the same number of steps, or DDP's collectives stop matching.
    """

    def __iter__(self) -> Any:
        order = torch.randperm(self.total_size, generator=torch.Generator().manual_seed(self.shuffle_seed + self.epoch))
        shard = order[self.rank : self.total_size : self.num_replicas]
        for _ in range(self.num_batches):
            mask = torch.rand(self.num_samples, generator=self.generator) < self.sample_rate
            yield shard[mask.nonzero(as_tuple=False).reshape(-1)]


def poisson_loader(loader: DataLoader, distributed: bool, seed: int) -> DataLoader:
    """A loader over ``loader``'s dataset drawing Poisson batches at rate 1/len(loader), len(loader) steps."""
    steps, size = len(loader), len(loader.dataset)
    empty_safe_collate = DPDataLoader.from_data_loader(loader).collate_fn  # collates empty batches too
    sampler = (
        EveryStepDistributedSampler(total_size=size, sample_rate=1 / steps, steps=steps, shuffle_seed=seed)
        if distributed
        else UniformWithReplacementSampler(num_samples=size, sample_rate=1 / steps, steps=steps)
    )
    return DataLoader(
        loader.dataset,
        batch_sampler=sampler,
        collate_fn=empty_safe_collate,
        num_workers=loader.num_workers,
        pin_memory=loader.pin_memory,
    )


class DPSGD(L.Callback):
    """Train any LightningModule with (epsilon, delta)-DP SGD (see the module docstring).

    Args:
        noise_multiplier: sigma; give it or ``target_epsilon``.
        target_epsilon: calibrate sigma so that training for ``trainer.max_epochs`` (or
            ``max_steps``) spends this epsilon at ``target_delta``.
        target_delta: the delta of the reported epsilon, in (0, 1); usually below 1/N.
        max_grad_norm: C, the per-sample clipping norm (> 0).
        accountant: ``prv`` (default), ``rdp`` or ``gdp``.
        clipping: ``flat`` (one norm over all parameters) or ``per_layer``.
        grad_sample_mode: ``hooks``, ``functorch`` or ``ghost`` (ghost clipping).
        poisson_sampling: draw batches by Poisson sampling (the accountant's assumption).
        max_physical_batch_size: split logical batches into chunks of at most this many
            samples (memory), accumulating clipped gradients before the noisy step.
    """

    def __init__(
        self,
        noise_multiplier: float | None = None,
        target_epsilon: float | None = None,
        target_delta: float = 1e-5,
        max_grad_norm: float = 1.0,
        accountant: Accountant = "prv",
        clipping: Clipping = "flat",
        grad_sample_mode: GradSampleMode = "hooks",
        poisson_sampling: bool = True,
        max_physical_batch_size: int | None = None,
    ) -> None:
        if (noise_multiplier is None) == (target_epsilon is None):
            raise ValueError("DPSGD needs exactly one of noise_multiplier and target_epsilon")
        if noise_multiplier is not None and noise_multiplier < 0:
            raise ValueError(f"noise_multiplier must be >= 0, got {noise_multiplier}")
        if target_epsilon is not None and target_epsilon <= 0:
            raise ValueError(f"target_epsilon must be > 0, got {target_epsilon}")
        if not 0 < target_delta < 1:
            raise ValueError(f"target_delta must lie in (0, 1), got {target_delta}")
        if max_grad_norm <= 0:
            raise ValueError(f"max_grad_norm must be > 0, got {max_grad_norm}")
        for key, value, allowed in (
            ("accountant", accountant, ("prv", "rdp", "gdp")),
            ("clipping", clipping, ("flat", "per_layer")),
            ("grad_sample_mode", grad_sample_mode, ("hooks", "functorch", "ghost")),
        ):
            if value not in allowed:
                raise ValueError(f"{key} must be one of {allowed}, got '{value}'")
        if grad_sample_mode == "ghost" and clipping != "flat":
            raise ValueError("ghost clipping supports clipping='flat' only")
        if max_physical_batch_size is not None and max_physical_batch_size < 1:
            raise ValueError(f"max_physical_batch_size must be a positive integer, got {max_physical_batch_size}")
        if grad_sample_mode == "ghost" and max_physical_batch_size is not None:
            raise ValueError("max_physical_batch_size is not supported with ghost clipping (it already saves memory)")
        self.noise_multiplier = noise_multiplier
        self.target_epsilon = target_epsilon
        self.target_delta = target_delta
        self.max_grad_norm = max_grad_norm
        self.accountant_name = accountant
        self.clipping = clipping
        self.grad_sample_mode = grad_sample_mode
        self.poisson_sampling = poisson_sampling
        self.max_physical_batch_size = max_physical_batch_size
        self.accountant = create_accountant(accountant)
        self.sample_rate: float | None = None
        self.expected_batch_size: float | None = None
        self._hooks: Any = None
        self._patched_source: Any = None
        self._optimizer: DPOptimizer | None = None
        self._module: PerSampleLossModule | None = None
        self._sampler: Any = None
        self._restored = False
        self._explicit_noise = noise_multiplier is not None

    @property
    def manual(self) -> bool:
        """Ghost clipping and physical batches run the step themselves (manual optimisation)."""
        return self.grad_sample_mode == "ghost" or self.max_physical_batch_size is not None

    @property
    def epsilon(self) -> float:
        """Epsilon spent so far at ``target_delta``: 0 before the first step, infinite without noise."""
        if not self.accountant.history:
            return 0.0
        if any(sigma == 0 for sigma, _, _ in self.accountant.history):
            return float("inf")
        return self.accountant.get_epsilon(self.target_delta)

    # -- set-up ----------------------------------------------------------------------------

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        if stage != "fit":
            return
        # a new fit starts a new accounting; a checkpoint restored after setup brings its own
        self.accountant = create_accountant(self.accountant_name)
        self._restored = False
        self.sample_rate = self.expected_batch_size = None
        if not self._explicit_noise:
            self.noise_multiplier = None
        self._check_trainer(trainer)
        validate_privatisable(pl_module)
        if self.manual and not isinstance(pl_module, PerSampleLossModule):
            raise TypeError(
                f"DPSGD with grad_sample_mode='ghost' or max_physical_batch_size needs a module that derives "
                f"from trustlit.privacy.PerSampleLossModule; {type(pl_module).__name__} does not"
            )
        self._patch_train_dataloader(trainer, pl_module)

    def on_fit_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self.manual:  # after the module's own setup, which resets it
            pl_module.dp_manual_step = self._manual_step
            self._module = pl_module

    def _check_trainer(self, trainer: L.Trainer) -> None:
        strategy = trainer.strategy
        if not is_supported(strategy, DPSGD_STRATEGIES):
            # FSDP and ModelParallelStrategy shard parameters (Opacus's per-sample gradient hooks need whole
            # layers); DeepSpeed, though a DDPStrategy subclass, runs its own optimiser step
            raise ValueError(
                f"DPSGD does not support the {type(strategy).__name__} strategy; supported: "
                f"{list(DPSGD_STRATEGIES)} (set trainer.strategy to ddp, or train on one device)"
            )
        if trainer.accumulate_grad_batches != 1:
            raise ValueError(
                "DPSGD refuses accumulate_grad_batches > 1 (each accumulated batch would be accounted as a "
                "separate Poisson sample): raise the batch size, or use max_physical_batch_size for memory"
            )
        if trainer.gradient_clip_val:
            raise ValueError(
                "DPSGD refuses gradient_clip_val: Opacus replaces the clipped gradient by its own; per-sample "
                "clipping is set by DPSGD(max_grad_norm=...)"
            )
        if str(trainer.precision).startswith("16"):
            raise ValueError(
                f"DPSGD refuses precision={trainer.precision}: the loss scale of 16-bit mixed precision inflates "
                "every per-sample gradient before clipping; use 32-true or bf16-mixed"
            )
        if self._distributed(trainer):
            if trainer._accelerator_connector.use_distributed_sampler:
                raise ValueError(
                    "DPSGD under DDP installs a distributed Poisson sampler: set Trainer(use_distributed_sampler=False)"
                )
            if not self.poisson_sampling:
                raise ValueError(
                    "DPSGD under DDP needs poisson_sampling=True: without it every rank would train on the "
                    "same batches and each sample would be counted once per rank"
                )
            if self.max_physical_batch_size is not None:
                raise ValueError(
                    "DPSGD does not support max_physical_batch_size under DDP (ranks would split their Poisson "
                    "batches into different numbers of backward passes): use more ranks or a smaller batch"
                )

    @staticmethod
    def _distributed(trainer: L.Trainer) -> bool:
        return isinstance(trainer.strategy, DDPStrategy) and trainer.world_size > 1

    def _patch_train_dataloader(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        """Serve the train dataloader through Opacus's Poisson sampler (an instance attribute)."""
        source = trainer.datamodule if trainer.datamodule is not None else pl_module
        original = source.train_dataloader
        distributed = self._distributed(trainer)

        def dp_train_dataloader() -> DataLoader:
            loader = original()
            self.sample_rate = 1 / len(loader)
            self.expected_batch_size = len(loader.dataset) * self.sample_rate
            if not self.poisson_sampling:
                return loader
            dp_loader = poisson_loader(loader, distributed, seed=int(torch.initial_seed()) % 2**31)
            self._sampler = dp_loader.batch_sampler
            return dp_loader

        source.train_dataloader = dp_train_dataloader
        self._patched_source = source

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self.sample_rate is None:
            raise RuntimeError(
                "DPSGD could not replace the training data by Poisson batches: pass a DataModule or define the "
                "module's train_dataloader (dataloaders given to trainer.fit(train_dataloaders=...) are not supported)"
            )
        if len(trainer.optimizers) != 1:
            raise ValueError(f"DPSGD supports exactly one optimizer, the module configures {len(trainer.optimizers)}")
        if self.noise_multiplier is None:
            self.noise_multiplier = self._calibrate_noise(trainer)
        elif self._restored and self.target_epsilon is not None:
            self._check_resumed_budget(trainer)
        kwargs = {"max_grad_norm": self.max_grad_norm} if self.grad_sample_mode == "ghost" else {}
        self._hooks = prepare_module(
            pl_module, self.grad_sample_mode, wrap_model=False, batch_first=True, loss_reduction="mean", **kwargs
        )
        if self.poisson_sampling and not self.manual:
            self._hooks.forbid_grad_accumulation()
        self._optimizer = self._wrap_optimizer(trainer)
        trainer.strategy.optimizers = [self._optimizer]

    def _planned_steps(self, trainer: L.Trainer) -> int:
        if trainer.max_steps is not None and trainer.max_steps > 0:
            return trainer.max_steps
        if trainer.max_epochs is not None and trainer.max_epochs > 0:
            return trainer.max_epochs * round(1 / self.sample_rate)
        raise ValueError("DPSGD(target_epsilon=...) needs trainer.max_epochs or trainer.max_steps")

    def _calibrate_noise(self, trainer: L.Trainer) -> float:
        return get_noise_multiplier(
            target_epsilon=self.target_epsilon,
            target_delta=self.target_delta,
            sample_rate=self.sample_rate,
            steps=self._planned_steps(trainer),
            accountant=self.accountant_name,
        )

    def _check_resumed_budget(self, trainer: L.Trainer) -> None:
        """The noise was calibrated for the first run: refuse a resume that would overspend."""
        remaining = self._planned_steps(trainer) - sum(steps for _, _, steps in self.accountant.history)
        projected = create_accountant(self.accountant_name)
        projected.history = [*self.accountant.history, (self.noise_multiplier, self.sample_rate, max(0, remaining))]
        epsilon = projected.get_epsilon(self.target_delta)
        if epsilon > self.target_epsilon * 1.01:
            raise ValueError(
                f"resuming to {self._planned_steps(trainer)} steps would spend epsilon={epsilon:.3f} > target_epsilon="
                f"{self.target_epsilon}: the noise was calibrated for the original run's length"
            )

    def _wrap_optimizer(self, trainer: L.Trainer) -> DPOptimizer:
        distributed = self._distributed(trainer)
        optimizer_class = get_optimizer_class(self.clipping, distributed, self.grad_sample_mode)
        expected_batch_size = self.expected_batch_size / (trainer.world_size if distributed else 1)
        original = trainer.optimizers[0]
        params = [p for group in original.param_groups for p in group["params"] if p.requires_grad]
        max_grad_norm = self.max_grad_norm
        if self.clipping == "per_layer":  # the same total norm C, split evenly over the tensors
            max_grad_norm = [self.max_grad_norm / len(params) ** 0.5] * len(params)
        optimizer = optimizer_class(
            optimizer=original,
            noise_multiplier=self.noise_multiplier,
            max_grad_norm=max_grad_norm,
            expected_batch_size=expected_batch_size,
            loss_reduction="mean",
        )
        account = self.accountant.get_optimizer_hook_fn(sample_rate=self.sample_rate)
        module = trainer.lightning_module

        def step_hook(dp_optimizer: DPOptimizer) -> None:
            account(dp_optimizer)
            self._add_regularizer_gradient(module)

        optimizer.attach_step_hook(step_hook)
        return optimizer

    @staticmethod
    def _add_regularizer_gradient(module: L.LightningModule) -> None:
        """Add grad(regularizer) to the privatised gradient: Opacus dropped it from the loss."""
        regularizer = getattr(module, "regularizer", None)
        if regularizer is None:
            return
        params = [p for p in module.parameters() if p.requires_grad]
        with torch.enable_grad():
            value = regularizer()
            if not value.requires_grad:
                return
            grads = torch.autograd.grad(value, params, allow_unused=True)
        for p, g in zip(params, grads, strict=True):
            if g is not None:
                p.grad = g if p.grad is None else p.grad + g

    # -- every step ------------------------------------------------------------------------

    def on_before_optimizer_step(
        self, trainer: L.Trainer, pl_module: L.LightningModule, optimizer: torch.optim.Optimizer
    ) -> None:
        if self.grad_sample_mode == "ghost":
            return  # ghost clipping clips with per-sample norms, never materialising per-sample gradients
        missing = [n for n, p in pl_module.named_parameters() if p.requires_grad and p.grad_sample is None]
        if missing:
            raise RuntimeError(
                f"DPSGD: no per-sample gradient for {missing[:5]}: either the loss was not computed through these "
                "parameters' layers, or training_step ran another forward pass with gradients enabled (wrap "
                "metrics in torch.no_grad()); their gradient would be used without clipping or noise"
            )

    def _manual_step(self, batch: Any) -> torch.Tensor:
        """One logical DP step for a :class:`PerSampleLossModule` (ghost clipping or chunks)."""
        module = self._module
        lightning_optimizer = module.optimizers()
        chunks = _split_batch(batch, self.max_physical_batch_size) if self.max_physical_batch_size else [batch]
        total, count = torch.zeros((), device=module.device), 0
        for k, chunk in enumerate(chunks):
            losses = module.per_sample_losses(chunk)
            total, count = total + losses.detach().sum(), count + losses.numel()
            mean = mean_or_zero(losses)
            if self.grad_sample_mode == "ghost":
                self._ghost_backward(module, losses, mean)
            else:
                module.manual_backward(mean)
            if k < len(chunks) - 1:
                # clip and accumulate only: stepping the raw optimizer keeps global_step logical
                self._optimizer.signal_skip_step(do_skip=True)
                self._optimizer.step()
                self._optimizer.zero_grad()
        lightning_optimizer.step()
        lightning_optimizer.zero_grad()
        self._step_schedulers(module.trainer, "step")
        loss = total / max(1, count) + module.regularizer().detach()
        module.log("train/loss", loss, prog_bar=True, batch_size=max(1, count))
        return loss

    @staticmethod
    def _step_schedulers(trainer: L.Trainer, interval: str) -> None:
        """Lightning steps LR schedulers only under automatic optimisation: do it for the manual step."""
        count = trainer.global_step if interval == "step" else trainer.current_epoch + 1
        for config in trainer.lr_scheduler_configs:
            if config.interval == interval and count % config.frequency == 0:
                config.scheduler.step()

    def _ghost_backward(self, module: L.LightningModule, losses: torch.Tensor, mean: torch.Tensor) -> None:
        """Ghost clipping: per-sample norms from a first pass, clipped sum from a second."""
        module.manual_backward(mean, retain_graph=True)
        self._optimizer.zero_grad()
        coefficients = self._hooks.get_clipping_coef().to(losses.device)
        self._hooks.disable_hooks()
        module.manual_backward((coefficients * losses).sum())
        self._hooks.enable_hooks()

    # -- logging, checkpoints, clean-up ----------------------------------------------------

    def on_train_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if hasattr(self._sampler, "set_epoch"):  # Lightning only looks for samplers inside batch samplers
            self._sampler.set_epoch(trainer.current_epoch)

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self._module is not None:
            self._step_schedulers(trainer, "epoch")
        pl_module.log("dp/epsilon", self.epsilon, on_epoch=True)
        pl_module.log("dp/delta", self.target_delta, on_epoch=True)

    def state_dict(self) -> dict[str, Any]:
        return {
            "history": list(self.accountant.history),
            "noise_multiplier": self.noise_multiplier,
            "accountant": self.accountant_name,
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        if state_dict["accountant"] != self.accountant_name:
            raise ValueError(
                f"the checkpoint was accounted with '{state_dict['accountant']}', this run uses "
                f"'{self.accountant_name}': resume with the same accountant"
            )
        self.accountant.history = list(state_dict["history"])
        if not self._explicit_noise:  # keep the calibrated noise; an explicit one is the user's choice
            self.noise_multiplier = state_dict["noise_multiplier"]
        self._restored = True

    def on_exception(self, trainer: L.Trainer, pl_module: L.LightningModule, exception: BaseException) -> None:
        self._clean_up()  # Lightning does not call teardown after a failure

    def teardown(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        if stage == "fit":
            self._clean_up()

    def _clean_up(self) -> None:
        """Remove the hooks and restore the data loader. A module in manual mode stays so until its
        next ``setup`` (next fit), so that ``trainer.global_step`` still counts this fit's steps."""
        if self._hooks is not None:
            self._hooks.cleanup()  # removes the hooks and the per-sample attributes of the parameters
            self._hooks = None
        if self._patched_source is not None:
            del self._patched_source.train_dataloader  # back to the class's method
            self._patched_source = None
        self._module = None
        self._sampler = None
