"""IdkDPO (TOFU's ``idk`` preference baseline, Maini et al., arXiv 2401.06121; DPO: Rafailov et al.,
NeurIPS 2023, arXiv 2305.18290): prefer a refusal to the forget answer.

L = -(2/beta) * mean_i log sigmoid(beta * [(logp_theta(r_i|x_i) - logp_ref(r_i|x_i))
                                           - (logp_theta(y_i|x_i) - logp_ref(y_i|x_i))])
    + alpha * NLL_retain

with x_i a forget question, y_i its answer (rejected), r_i a refusal such as "I don't know."
(preferred; ``ForgetRetainDataModule(refusals=...)`` supplies it as ``batch["idk"]``), logp
summed over answer tokens and pi_ref the model before unlearning. Defaults (open-unlearning's
TOFU config): beta = 0.1, alpha = 1.

Notes: docs/methods/idk_dpo.md
"""

from __future__ import annotations

from typing import Any

import torch

from trustlit.unlearning.base import PreferenceUnlearning
from trustlit.unlearning.losses import dpo_loss, token_mean_nll


class IdkDPO(PreferenceUnlearning):
    """DPO towards refusals on the forget set, plus a retain term (see the module docstring);
    arguments as :class:`PreferenceUnlearning`'s."""

    def preference_terms(self, batch: dict[str, Any]) -> dict[str, torch.Tensor]:
        if "idk" not in batch:
            raise ValueError("IdkDPO needs refusal answers: set `refusals` on the ForgetRetainDataModule")
        chosen_logp, _ = self.logprobs(batch["idk"])
        rejected_logp, num_tokens = self.logprobs(batch["forget"])
        ref_chosen_logp, _ = self.reference.sequence_logprobs(batch["idk"])
        ref_rejected_logp, _ = self.reference.sequence_logprobs(batch["forget"])
        return {
            "preference": dpo_loss(chosen_logp, rejected_logp, ref_chosen_logp, ref_rejected_logp, self.hparams.beta),
            "forget_nll": token_mean_nll(rejected_logp, num_tokens),
        }
