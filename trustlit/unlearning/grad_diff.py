"""Gradient difference (GradDiff; Liu et al., "Continual Learning and Private Unlearning", 2022,
arXiv 2203.12817; TOFU's ``grad_diff``): ascend on the forget set while descending on the retain set.

L = gamma * (-NLL_forget) + alpha * L_retain, with L_retain the token-mean NLL of the retain
answers (``retain_loss="nll"``) or KL(pi_ref || pi_theta) of the next-token distributions on the
retain batch (``"kl"``), averaged over its answer tokens (``kl_reduction="answer_tokens"``) or, as
TOFU and open-unlearning do, over all B*T positions of the padded batch (``"all_positions"``;
:func:`~trustlit.unlearning.losses.kl_to_reference`). Defaults gamma = alpha = 1, NLL, as in
open-unlearning's TOFU configs.

Notes: docs/methods/grad_diff.md
"""

from __future__ import annotations

from typing import Any

import torch

from trustlit.hparams import NonNegativeFloat, check_arguments
from trustlit.llm.loading import CausalLMSpec
from trustlit.unlearning.base import RetainLoss, UnlearningModule, check_retain_loss
from trustlit.unlearning.losses import KLReduction, check_kl_reduction, gradient_ascent_loss


class GradDiff(UnlearningModule):
    """L = gamma * (-NLL_forget) + alpha * L_retain.

    Args:
        forget_weight: gamma.
        retain_weight: alpha.
        retain_loss: ``nll`` or ``kl`` (KL needs pi_ref: a frozen copy, or adapters disabled).
        kl_reduction: how the KL retain term averages: ``answer_tokens`` (mean over retain answer tokens)
            or ``all_positions`` (TOFU's and open-unlearning's mean over every position of the batch).
        Other arguments: see :class:`~trustlit.CausalLMModule`.
    """

    def __init__(
        self,
        lm: CausalLMSpec | None = None,
        forget_weight: NonNegativeFloat = 1.0,
        retain_weight: NonNegativeFloat = 1.0,
        retain_loss: RetainLoss = "nll",
        kl_reduction: KLReduction = "answer_tokens",
        **kwargs: Any,
    ) -> None:
        check_arguments(GradDiff.__init__, locals())
        check_retain_loss(retain_loss)
        check_kl_reduction(kl_reduction)
        super().__init__(lm, **kwargs)
        self.retain_loss_kind = retain_loss  # not from hparams: subclasses fix it (KLMinimization)
        if retain_loss == "kl":
            self.use_reference()

    def losses(self, batch: dict[str, Any]) -> dict[str, torch.Tensor]:
        forget = gradient_ascent_loss(*self.logprobs(batch["forget"]))
        retain = self.retain_loss(batch["retain"], self.retain_loss_kind, self.hparams.kl_reduction)
        loss = self.hparams.forget_weight * forget + self.hparams.retain_weight * retain
        return {"loss": loss, "forget_nll": -forget.detach(), f"retain_{self.retain_loss_kind}": retain.detach()}
