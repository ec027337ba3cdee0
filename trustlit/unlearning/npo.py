"""Negative Preference Optimization (NPO; Zhang et al., 2024, "Negative Preference Optimization:
From Catastrophic Collapse to Effective Unlearning", arXiv 2404.05868).

L = -(2/beta) * mean_i log sigmoid(beta * (NLL_theta(y_i|x_i) - NLL_ref(y_i|x_i))) + alpha * L_retain

on forget pairs (x_i, y_i), NLL summed over answer tokens, pi_ref the model before unlearning
(a frozen copy, or the LoRA model with adapters disabled). Its gradient is gradient ascent's
reweighted by sigmoid(-beta * (NLL_theta - NLL_ref)), which vanishes as the forget answers
become unlikely; that is what stops NPO's collapse. Defaults (paper, open-unlearning TOFU):
beta = 0.1, alpha = 1, retain NLL.
"""

from __future__ import annotations

from typing import Any

import torch

from trustlit.models import CausalLMSpec
from trustlit.unlearning.base import RetainLoss, UnlearningModule, check_positive, check_retain_loss
from trustlit.unlearning.losses import npo_loss, token_mean_nll


class NPO(UnlearningModule):
    """NPO with a retain term (see the module docstring).

    Args:
        beta: inverse temperature of the preference loss.
        forget_weight: weight of the NPO term (1 in the paper).
        retain_weight: alpha.
        retain_loss: ``nll`` or ``kl``.
        Other arguments: see :class:`~trustlit.CausalLMModule`.
    """

    def __init__(
        self,
        lm: CausalLMSpec | None = None,
        beta: float = 0.1,
        forget_weight: float = 1.0,
        retain_weight: float = 1.0,
        retain_loss: RetainLoss = "nll",
        **kwargs: Any,
    ) -> None:
        check_positive(beta=beta)
        check_retain_loss(retain_loss)
        super().__init__(lm, **kwargs)
        self.use_reference()

    def losses(self, batch: dict[str, Any]) -> dict[str, torch.Tensor]:
        forget = batch["forget"]
        logp, num_tokens = self.logprobs(forget)
        ref_logp, _ = self.reference.sequence_logprobs(forget)
        forget_term = npo_loss(logp, ref_logp, self.hparams.beta)
        retain = self.retain_loss(batch["retain"], self.hparams.retain_loss)
        loss = self.hparams.forget_weight * forget_term + self.hparams.retain_weight * retain
        return {
            "loss": loss,
            "npo": forget_term.detach(),
            f"retain_{self.hparams.retain_loss}": retain.detach(),
            "forget_nll": token_mean_nll(logp, num_tokens).detach(),
        }
