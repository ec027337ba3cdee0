"""What every harmful-fine-tuning defense shares: the batch parts, the losses, manual steps.

Setting (Huang et al., "Harmful Fine-tuning Attacks and Defenses for LLMs: A Survey", 2024):
a safety-aligned model is fine-tuned on user data of which a fraction p is harmful. A training
batch of :class:`~trustlit.data.safety.HarmfulFineTuningDataModule` holds up to three parts,
each a QA batch (:func:`trustlit.llm.scoring.collate_qa`, plus a per-sample ``harmful`` flag):

- ``finetune``: the user's mixture (benign task data and harmful samples);
- ``align``: the alignment set (harmful requests answered by refusals, benign capability data);
- ``harmful``: a separate harmful set (the defender's h in Panacea, Booster, RepNoise).

A method names the parts it needs in ``required_parts``; a missing one is an error at the first
step that names the part and the method. Losses are the usual answer-token NLL
(:func:`trustlit.llm.scoring.answer_nll`): prompt tokens never enter a loss.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

import torch
from torch import nn

from trustlit.llm.module import CausalLMModule
from trustlit.llm.scoring import answer_nll
from trustlit.strategies import StrategySupport


class SafetyModule(StrategySupport, CausalLMModule):
    """Base of the defenses (see the module docstring); arguments as :class:`~trustlit.CausalLMModule`'s.

    ``supported_strategies`` names the Lightning strategies (class names) a method runs under.
    Panacea and Booster assemble their update from several parameter gradients taken with
    ``torch.autograd.grad``, outside DDP's all-reduce hooks (under DDP their replicas drift apart),
    and BDS's scheduler is a second set of parameters with its own backward, which DDP's reducer
    would see as unused in the model's backward: these run on one device. The single-backward
    defenses (SFT, Lisa, Vaccine, RepNoise) add DDP; tests/test_strategies.py checks that their
    replicas stay equal on two processes.
    """

    required_parts: ClassVar[tuple[str, ...]] = ("finetune",)

    def setup(self, stage: str) -> None:
        if stage != "fit":
            return
        self.check_strategy()
        available = getattr(self.trainer.datamodule, "available_parts", None)
        missing = [name for name in self.required_parts if available is not None and name not in available]
        if missing:
            raise ValueError(
                f"{type(self).__name__} needs the {missing} set(s), but the data module gives only "
                f"{sorted(available)}: {describe_parts(missing)}"
            )

    def part(self, batch: dict[str, Any], name: str) -> dict[str, Any]:
        """The batch part ``name``; an error naming the method and the data's parts if it is absent."""
        if name not in batch:
            raise ValueError(
                f"{type(self).__name__} needs the '{name}' set in every batch, but the batch holds only "
                f"{sorted(k for k in batch if isinstance(batch[k], dict))}: {describe_parts([name])}"
            )
        return batch[name]

    def part_loss(self, batch: dict[str, Any], name: str) -> torch.Tensor:
        """Mean answer-token NLL of the model on the batch part ``name``."""
        return answer_nll(self.model, self.part(batch, name))

    def trainable_parameters(self) -> list[nn.Parameter]:
        return [p for p in self.model.parameters() if p.requires_grad]

    def log_terms(self, terms: dict[str, torch.Tensor], batch_size: int) -> None:
        for name, value in terms.items():
            self.log(f"train/{name}", value.detach(), prog_bar=name == "loss", batch_size=batch_size)


PART_DESCRIPTIONS = {
    "finetune": "the fine-tuning mixture",
    "align": "an alignment set (safe answers to harmful requests; BeaverTails is_safe records)",
    "harmful": "a separate harmful set (harmful requests with harmful answers)",
}


def describe_parts(names: Sequence[str]) -> str:
    return "give " + "; ".join(PART_DESCRIPTIONS.get(n, n) for n in names)


class ManualStepMixin:
    """Manual optimisation for methods that assemble their update from several gradients."""

    automatic_optimization = False

    def apply_update(self, params: Sequence[nn.Parameter], update: Sequence[torch.Tensor]) -> None:
        """One optimiser step (and lr-schedule step) along ``update``, as if it were the gradient."""
        optimizer = self.optimizers()
        for p, u in zip(params, update, strict=True):
            p.grad = u.detach().to(p.dtype)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        scheduler = self.lr_schedulers()
        if scheduler is not None:
            scheduler.step()
