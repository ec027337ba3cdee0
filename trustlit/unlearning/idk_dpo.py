"""IdkDPO (TOFU's ``idk`` preference baseline; Rafailov et al., 2023 for DPO, Maini et al., 2024):
prefer a refusal to the forget answer.

L = -(2/beta) * mean_i log sigmoid(beta * [(logp_theta(r_i|x_i) - logp_ref(r_i|x_i))
                                           - (logp_theta(y_i|x_i) - logp_ref(y_i|x_i))])
    + alpha * NLL_retain

with x_i a forget question, y_i its answer (rejected), r_i a refusal such as "I don't know."
(preferred; ``ForgetRetainDataModule(refusals=...)`` supplies it as ``batch["idk"]``), logp
summed over answer tokens and pi_ref the model before unlearning. Defaults (open-unlearning's
TOFU config): beta = 0.1, alpha = 1.
"""

from __future__ import annotations

from typing import Any

import torch

from trustlit.models import CausalLMSpec
from trustlit.unlearning.base import RetainLoss, UnlearningModule, check_positive, check_retain_loss
from trustlit.unlearning.losses import dpo_loss, token_mean_nll


class IdkDPO(UnlearningModule):
    """DPO towards refusals on the forget set, plus a retain term (see the module docstring).

    Args:
        beta: DPO inverse temperature.
        forget_weight: weight of the DPO term.
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
        if "idk" not in batch:
            raise ValueError("IdkDPO needs refusal answers: set `refusals` on the ForgetRetainDataModule")
        chosen_logp, _ = self.logprobs(batch["idk"])
        rejected_logp, num_tokens = self.logprobs(batch["forget"])
        ref_chosen_logp, _ = self.reference.sequence_logprobs(batch["idk"])
        ref_rejected_logp, _ = self.reference.sequence_logprobs(batch["forget"])
        forget_term = dpo_loss(chosen_logp, rejected_logp, ref_chosen_logp, ref_rejected_logp, self.hparams.beta)
        retain = self.retain_loss(batch["retain"], self.hparams.retain_loss)
        loss = self.hparams.forget_weight * forget_term + self.hparams.retain_weight * retain
        return {
            "loss": loss,
            "dpo": forget_term.detach(),
            f"retain_{self.hparams.retain_loss}": retain.detach(),
            "forget_nll": token_mean_nll(rejected_logp, num_tokens).detach(),
        }
