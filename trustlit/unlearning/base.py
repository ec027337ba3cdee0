"""What every unlearning method shares: forget/retain batches, the reference model, retain losses.

A method subclasses :class:`UnlearningModule` and implements :meth:`UnlearningModule.losses`,
which maps a training batch ``{"forget": ..., "retain": ...}`` (from
:class:`~trustlit.data.ForgetRetainDataModule`) to named scalar terms, ``loss`` among them.
Every term is logged as ``train/<name>``. Evaluation is :class:`~trustlit.CausalLMModule`'s.
"""

from __future__ import annotations

import copy
from typing import Any, ClassVar, Literal

import torch
from torch import nn
from transformers.modeling_outputs import CausalLMOutputWithPast

from trustlit.hparams import NonNegativeFloat, PositiveFloat, check_arguments
from trustlit.llm.loading import CausalLMSpec
from trustlit.llm.module import CausalLMModule
from trustlit.llm.scoring import eval_mode, sequence_logprobs_from_logits
from trustlit.strategies import DDP, SINGLE_DEVICE, StrategySupport
from trustlit.unlearning.losses import KLReduction, kl_to_reference, token_mean_nll

RetainLoss = Literal["nll", "kl"]


def is_peft_model(model: nn.Module) -> bool:
    return hasattr(model, "disable_adapter") and hasattr(model, "get_base_model")


class ReferenceModel:
    """pi_ref, the model as it was before unlearning; it never trains and never gets gradients.

    For a peft (LoRA) model it is the same network with its adapters disabled, so no second
    copy is held in memory; otherwise a frozen deep copy taken at construction. The copy is
    not a registered submodule: it stays out of checkpoints, optimisers and DDP, and follows
    the trained model to its device on each call.
    """

    def __init__(self, model: nn.Module) -> None:
        self.model = model
        self.copy = None if is_peft_model(model) else copy.deepcopy(model).eval().requires_grad_(False)

    @property
    def network(self) -> nn.Module:
        """The module that computes pi_ref (for hooks on its layers)."""
        return self.model if self.copy is None else self.copy

    @torch.no_grad()
    def __call__(self, **inputs: Any) -> CausalLMOutputWithPast:
        if self.copy is not None:
            self.copy.to(next(self.model.parameters()).device)
            return self.copy(**inputs)
        # pi_ref is evaluated without dropout, as the frozen copy is
        with eval_mode(self.model), self.model.disable_adapter():
            return self.model(**inputs)

    def sequence_logprobs(self, batch: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor]:
        logits = self(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
        return sequence_logprobs_from_logits(logits, batch["labels"])


class UnlearningModule(StrategySupport, CausalLMModule):
    """Base of the unlearning methods (see the module docstring); arguments as CausalLMModule's.

    ``supported_strategies`` names the Lightning strategies (class names) a method runs under;
    others are refused at setup. The default is single-device and DDP: the frozen reference copy
    is not sharded (it would hold the whole model on every rank and run outside FSDP's
    all-gathers), and activation hooks on a block would see sharded parameters. Methods that
    only run the trained model's forward (GradAscent, SimNPO) add ``ModelParallelStrategy``
    (FSDP2, tested on CPU against DDP); ``FSDPStrategy`` (FSDP1, GPU only) is untested and refused.
    """

    supported_strategies: ClassVar[tuple[str, ...]] = (SINGLE_DEVICE, DDP)
    sharded_refusal = "it does not run sharded: a frozen reference copy or activation hooks"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.reference: ReferenceModel | None = None

    def use_reference(self) -> ReferenceModel:
        """Create pi_ref from the freshly loaded model (call in ``__init__``, before any step)."""
        self.reference = ReferenceModel(self.model)
        return self.reference

    def setup(self, stage: str) -> None:
        if stage == "fit":
            self.check_strategy()

    def losses(self, batch: dict[str, Any]) -> dict[str, torch.Tensor]:
        """Named loss terms of one forget/retain batch; ``loss`` is the one minimised."""
        raise NotImplementedError

    def training_step(self, batch: dict[str, Any], batch_idx: int) -> torch.Tensor:
        terms = self.losses(batch)
        batch_size = batch["forget"]["input_ids"].size(0)
        for name, value in terms.items():
            self.log(f"train/{name}", value, prog_bar=name == "loss", batch_size=batch_size)
        return terms["loss"]

    def logits(self, batch: dict[str, Any]) -> torch.Tensor:
        return self(batch["input_ids"], batch["attention_mask"])

    def logprobs(self, batch: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor]:
        """Summed answer log-probability and answer length per sample, under the trained model."""
        return sequence_logprobs_from_logits(self.logits(batch), batch["labels"])

    def retain_loss(
        self, retain: dict[str, Any], kind: RetainLoss, kl_reduction: KLReduction = "answer_tokens"
    ) -> torch.Tensor:
        """``nll``: token-mean NLL of the retain answers; ``kl``: KL(pi_ref || pi_theta), averaged over the answer
        tokens or over all positions (``kl_reduction``, :func:`~trustlit.unlearning.losses.kl_to_reference`)."""
        logits = self.logits(retain)
        if kind == "nll":
            return token_mean_nll(*sequence_logprobs_from_logits(logits, retain["labels"]))
        if self.reference is None:
            raise RuntimeError(f"{type(self).__name__}: retain_loss='kl' needs use_reference() in __init__")
        ref_logits = self.reference(input_ids=retain["input_ids"], attention_mask=retain["attention_mask"]).logits
        return kl_to_reference(logits, ref_logits, retain["labels"], kl_reduction)


class PreferenceUnlearning(UnlearningModule):
    """A preference loss against pi_ref on the forget set plus a retain term (NPO, IdkDPO).

    L = forget_weight * L_pref + retain_weight * L_retain; subclasses give L_pref in
    :meth:`preference_terms`.

    Args:
        beta: inverse temperature of the preference loss.
        forget_weight: weight of the preference term.
        retain_weight: alpha, weight of the retain term.
        retain_loss: ``nll`` or ``kl``.
        Other arguments: see :class:`~trustlit.CausalLMModule`.
    """

    def __init__(
        self,
        lm: CausalLMSpec | None = None,
        beta: PositiveFloat = 0.1,
        forget_weight: NonNegativeFloat = 1.0,
        retain_weight: NonNegativeFloat = 1.0,
        retain_loss: RetainLoss = "nll",
        **kwargs: Any,
    ) -> None:
        check_arguments(PreferenceUnlearning.__init__, locals())
        check_retain_loss(retain_loss)
        super().__init__(lm, **kwargs)
        self.use_reference()

    def preference_terms(self, batch: dict[str, Any]) -> dict[str, torch.Tensor]:
        """The forget-side terms: ``preference`` (minimised) and diagnostics such as ``forget_nll``."""
        raise NotImplementedError

    def losses(self, batch: dict[str, Any]) -> dict[str, torch.Tensor]:
        terms = self.preference_terms(batch)
        retain = self.retain_loss(batch["retain"], self.hparams.retain_loss)
        loss = self.hparams.forget_weight * terms["preference"] + self.hparams.retain_weight * retain
        return {"loss": loss, f"retain_{self.hparams.retain_loss}": retain.detach()} | {
            name: value.detach() for name, value in terms.items()
        }


def check_retain_loss(kind: str) -> None:
    if kind not in ("nll", "kl"):
        raise ValueError(f"retain_loss must be 'nll' or 'kl', got '{kind}'")
