"""The DPSGD callback: a facade that attaches DP-SGD's parts to a Lightning run.

DP-SGD (Abadi et al., CCS 2016) replaces the mini-batch gradient by

    g = (1 / B) * ( sum_{i in batch} clip_C(grad l_i(theta)) + N(0, sigma^2 C^2 I) ),
    clip_C(v) = v * min(1, C / ||v||_2),

with batches drawn by Poisson sampling at rate q = B / N, and accounts the privacy spent over
the steps with a privacy accountant (PRV by default). Symbols in the code: ``C`` is
``max_grad_norm``, ``sigma`` is ``noise_multiplier``, ``q`` is ``sample_rate``, ``B`` the
expected batch size. The parts: :mod:`.sampling` (the Poisson loader), :mod:`.optimizer`
(clipping, noise, the accountant's step hook, the regulariser's gradient), :mod:`.step`
(ghost clipping and physical batches), :mod:`.accounting` (epsilon, noise calibration, resumed
budgets), :mod:`.checks` (what is refused, and why).

Notes (per-sample gradients on the real model, DDP, regularisers, checkpoints, what is refused):
docs/methods/dpsgd.md
"""

from __future__ import annotations

from typing import Any

import lightning as L
import torch
from opacus.accountants import create_accountant
from opacus.grad_sample.utils import prepare_module
from opacus.optimizers import DPOptimizer
from torch.utils.data import DataLoader

from trustlit.hparams import NonNegativeFloat, OpenUnitInterval, PositiveFloat, PositiveInt, check_arguments
from trustlit.per_sample import PerSampleLossModule
from trustlit.privacy.dpsgd.accounting import (
    ACCOUNTANTS,
    AccountantName,
    calibrate_noise,
    check_resumed_budget,
    planned_steps,
    spent_epsilon,
)
from trustlit.privacy.dpsgd.checks import check_trainer, is_distributed, validate_privatisable
from trustlit.privacy.dpsgd.optimizer import Clipping, GradSampleMode, wrap_optimizer
from trustlit.privacy.dpsgd.sampling import poisson_loader
from trustlit.privacy.dpsgd.step import manual_dp_step, step_schedulers

CHOICES: dict[str, tuple[str, ...]] = {
    "accountant": ACCOUNTANTS,
    "clipping": ("flat", "per_layer"),
    "grad_sample_mode": ("hooks", "functorch", "ghost"),
}


class DPSGD(L.Callback):
    """Train any LightningModule with (epsilon, delta)-DP SGD (formula in the module docstring).

    Args:
        noise_multiplier: sigma >= 0; give it or ``target_epsilon``.
        target_epsilon: calibrate sigma so that training for ``trainer.max_epochs`` (or
            ``max_steps``) spends this epsilon (> 0) at ``target_delta``.
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
        noise_multiplier: NonNegativeFloat | None = None,
        target_epsilon: PositiveFloat | None = None,
        target_delta: OpenUnitInterval = 1e-5,
        max_grad_norm: PositiveFloat = 1.0,
        accountant: AccountantName = "prv",
        clipping: Clipping = "flat",
        grad_sample_mode: GradSampleMode = "hooks",
        poisson_sampling: bool = True,
        max_physical_batch_size: PositiveInt | None = None,
    ) -> None:
        check_arguments(DPSGD.__init__, locals())
        check_choices(accountant=accountant, clipping=clipping, grad_sample_mode=grad_sample_mode)
        if (noise_multiplier is None) == (target_epsilon is None):
            raise ValueError("DPSGD needs exactly one of noise_multiplier and target_epsilon")
        if grad_sample_mode == "ghost" and clipping != "flat":
            raise ValueError("ghost clipping supports clipping='flat' only")
        if grad_sample_mode == "ghost" and max_physical_batch_size is not None:
            raise ValueError("max_physical_batch_size is not supported with ghost clipping (it already saves memory)")
        # plain numbers: the noise multiplier goes into the accountant's history, saved in checkpoints
        self.noise_multiplier = None if noise_multiplier is None else float(noise_multiplier)
        self.target_epsilon = None if target_epsilon is None else float(target_epsilon)
        self.target_delta = float(target_delta)
        self.max_grad_norm = float(max_grad_norm)
        self.accountant_name = accountant
        self.clipping = clipping
        self.grad_sample_mode = grad_sample_mode
        self.poisson_sampling = poisson_sampling
        self.max_physical_batch_size = None if max_physical_batch_size is None else int(max_physical_batch_size)
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
        return spent_epsilon(self.accountant, self.target_delta)

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
        check_trainer(trainer, self.poisson_sampling, self.max_physical_batch_size)

    def _patch_train_dataloader(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        """Serve the train dataloader through a Poisson sampler (an instance attribute)."""
        source = trainer.datamodule if trainer.datamodule is not None else pl_module
        original = source.train_dataloader
        distributed = is_distributed(trainer)

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
        steps = planned_steps(trainer, self.sample_rate) if self.target_epsilon is not None else 0
        if self.noise_multiplier is None:
            self.noise_multiplier = calibrate_noise(
                self.target_epsilon, self.target_delta, self.sample_rate, steps, self.accountant_name
            )
        elif self._restored and self.target_epsilon is not None:
            check_resumed_budget(
                self.accountant_name,
                self.accountant.history,
                self.noise_multiplier,
                self.sample_rate,
                steps,
                self.target_epsilon,
                self.target_delta,
            )
        kwargs = {"max_grad_norm": self.max_grad_norm} if self.grad_sample_mode == "ghost" else {}
        self._hooks = prepare_module(
            pl_module, self.grad_sample_mode, wrap_model=False, batch_first=True, loss_reduction="mean", **kwargs
        )
        if self.poisson_sampling and not self.manual:
            self._hooks.forbid_grad_accumulation()
        distributed = is_distributed(trainer)
        self._optimizer = wrap_optimizer(
            trainer.optimizers[0],
            trainer.lightning_module,
            self.accountant,
            noise_multiplier=self.noise_multiplier,
            max_grad_norm=self.max_grad_norm,
            clipping=self.clipping,
            grad_sample_mode=self.grad_sample_mode,
            sample_rate=self.sample_rate,
            expected_batch_size=self.expected_batch_size / (trainer.world_size if distributed else 1),
            distributed=distributed,
        )
        trainer.strategy.optimizers = [self._optimizer]

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
        ghost = self.grad_sample_mode == "ghost"
        return manual_dp_step(self._module, self._optimizer, self._hooks, batch, ghost, self.max_physical_batch_size)

    # -- logging, checkpoints, clean-up ----------------------------------------------------

    def on_train_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if hasattr(self._sampler, "set_epoch"):  # Lightning only looks for samplers inside batch samplers
            self._sampler.set_epoch(trainer.current_epoch)

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self._module is not None:
            step_schedulers(trainer, "epoch")
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


def check_choices(**values: str) -> None:
    """Raise if a string argument is not one of :data:`CHOICES` (a Literal the restricted types cannot check)."""
    for key, value in values.items():
        if value not in CHOICES[key]:
            raise ValueError(f"DPSGD: {key}={value!r} is invalid, expected one of {CHOICES[key]}")
