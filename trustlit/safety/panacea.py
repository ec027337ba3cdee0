"""Panacea: post-fine-tuning perturbation against harmful fine-tuning.

Wang et al., "Panacea: Mitigating Harmful Fine-tuning for Large Language Models via
Post-fine-tuning Perturbation", NeurIPS 2025 (code: github.com/w-yibo/Panacea).

Fine-tuning learns, next to the weights w, a perturbation eps that the deployed model carries:

    max_w  max_{||eps|| <= rho}  lambda * (h(w + eps) - h(w)) - g(w)

with g the fine-tuning loss (the user's mixture) and h the loss on a separate harmful set.
The inner maximisation is one normalised ascent step on h. Each training step:

    G   = grad g(w)                              (fine-tuning gradient)
    Hw  = grad h(w)                              (harmful gradient)
    eps = rho * Hw / (||Hw||_2 + 1e-7)           (one global norm over the trainable weights)
    He  = grad min(h(w + eps), c)                (c = 5: the clamp stops the ascent once h > c)
    w  <- optimiser step along  G - lambda * (He - Hw)

After training the last eps is added to the weights once, by the :class:`ApplyPanaceaPerturbation`
callback at the end of fit. Defaults are the released scripts': rho = 1, lambda = 0.001, lr 2e-5
(LoRA r = 32, alpha = 4 on q/k/v, in the recipe's ``lm.lora``).

Notes: docs/methods/panacea.md (the released code, and our choices)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import lightning as L
import torch
from torch import nn

from trustlit.hparams import NonNegativeFloat, PositiveFloat, check_arguments
from trustlit.llm.loading import CausalLMSpec
from trustlit.llm.scoring import answer_nll
from trustlit.safety.base import ManualStepMixin, SafetyModule
from trustlit.safety.updates import panacea_update, parameter_gradients, perturbed, scaled_direction

PERTURBATION_KEY = "panacea_perturbation"


@dataclass
class PanaceaStep:
    """One step's update direction, its eps, and the losses it saw (for logging)."""

    update: list[torch.Tensor]
    perturbation: list[torch.Tensor]
    finetune_loss: torch.Tensor
    harmful_loss: torch.Tensor
    perturbed_harmful_loss: torch.Tensor


def panacea_step(
    params: Sequence[nn.Parameter],
    finetune_loss: Callable[[], torch.Tensor],
    harmful_loss: Callable[[], torch.Tensor],
    rho: float,
    lam: float,
    clamp: float = 5.0,
) -> PanaceaStep:
    """G - lambda * (He - Hw) and eps at the current weights (see the module docstring).

    ``finetune_loss`` and ``harmful_loss`` evaluate g and h at the parameters' current values;
    ``params`` are the trainable weights eps lives on. On return the weights are as on entry.
    """
    g = finetune_loss()
    finetune_grad = parameter_gradients(g, params)
    h = harmful_loss()
    harmful_grad = parameter_gradients(h, params)
    eps = scaled_direction(harmful_grad, rho)
    with perturbed(params, eps):
        h_eps = harmful_loss()
        perturbed_grad = parameter_gradients(h_eps.clamp(max=clamp), params)
    return PanaceaStep(
        update=panacea_update(finetune_grad, harmful_grad, perturbed_grad, lam),
        perturbation=[e.detach() for e in eps],
        finetune_loss=g.detach(),
        harmful_loss=h.detach(),
        perturbed_harmful_loss=h_eps.detach(),
    )


class Panacea(ManualStepMixin, SafetyModule):
    """Fine-tune on ``finetune`` while learning the post-fine-tuning perturbation (module docstring).

    Args:
        rho: radius of eps (global L2 norm over the trainable weights).
        lam: lambda, weight of the harmful-loss gain h(w + eps) - h(w).
        harmful_clamp: c, h(w + eps) is clamped at c before its gradient is taken.
        Other arguments: see :class:`~trustlit.CausalLMModule` (lr defaults to the released 2e-5).

    Each step runs three forward/backward passes (g at w, h at w, h at w + eps). The last eps is
    kept in ``perturbation`` (and in checkpoints); :meth:`apply_perturbation` adds it once.
    """

    required_parts = ("finetune", "harmful")

    def __init__(
        self,
        lm: CausalLMSpec | None = None,
        rho: NonNegativeFloat = 1.0,
        lam: NonNegativeFloat = 0.001,
        harmful_clamp: PositiveFloat = 5.0,
        lr: PositiveFloat = 2e-5,
        **kwargs: Any,
    ) -> None:
        check_arguments(Panacea.__init__, locals())
        super().__init__(lm, lr=lr, **kwargs)
        self.perturbation: list[torch.Tensor] | None = None
        self.perturbation_applied = False

    def training_step(self, batch: dict[str, Any], batch_idx: int) -> torch.Tensor:
        finetune, harmful = self.part(batch, "finetune"), self.part(batch, "harmful")
        params = self.trainable_parameters()
        step = panacea_step(
            params,
            lambda: answer_nll(self.model, finetune),
            lambda: answer_nll(self.model, harmful),
            self.hparams.rho,
            self.hparams.lam,
            self.hparams.harmful_clamp,
        )
        self.apply_update(params, step.update)
        self.perturbation = step.perturbation
        terms = {
            "loss": step.finetune_loss,
            "harmful_loss": step.harmful_loss,
            "perturbed_harmful_loss": step.perturbed_harmful_loss,
            "harmful_gain": step.perturbed_harmful_loss - step.harmful_loss,
        }
        self.log_terms(terms, finetune["input_ids"].size(0))
        return step.finetune_loss

    def apply_perturbation(self) -> None:
        """w <- w_T + eps_T, once: the model Panacea deploys."""
        if self.perturbation is None:
            raise RuntimeError("Panacea.apply_perturbation: no training step has computed a perturbation yet")
        if self.perturbation_applied:
            raise RuntimeError("Panacea.apply_perturbation: the perturbation is already applied")
        with torch.no_grad():
            for p, eps in zip(self.trainable_parameters(), self.perturbation, strict=True):
                p.add_(eps.to(p.device, p.dtype))
        self.perturbation_applied = True

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        if self.perturbation is not None:
            checkpoint[PERTURBATION_KEY] = {"tensors": self.perturbation, "applied": self.perturbation_applied}

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        saved = checkpoint.get(PERTURBATION_KEY)
        if saved is not None:
            self.perturbation = list(saved["tensors"])
            self.perturbation_applied = bool(saved["applied"])


class ApplyPanaceaPerturbation(L.Callback):
    """At the end of fit, add Panacea's last eps to the weights (w_T + eps_T is the deployed model).

    Args:
        checkpoint_name: also save the perturbed model as this file next to ``last.ckpt``
            (``None``: do not save). ``lm.name_or_path: <dir>/perturbed.ckpt`` loads it, e.g.
            to evaluate; ``last.ckpt`` keeps the unperturbed training state for resuming.
    """

    def __init__(self, checkpoint_name: str | None = "perturbed.ckpt") -> None:
        self.checkpoint_name = checkpoint_name

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if not isinstance(pl_module, Panacea):
            raise TypeError(f"ApplyPanaceaPerturbation needs a Panacea module, got {type(pl_module).__name__}")
        pl_module.apply_perturbation()
        checkpoint = trainer.checkpoint_callback
        if self.checkpoint_name is not None and checkpoint is not None and checkpoint.dirpath is not None:
            trainer.save_checkpoint(Path(checkpoint.dirpath) / self.checkpoint_name)
