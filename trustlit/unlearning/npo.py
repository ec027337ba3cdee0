"""Negative Preference Optimization (NPO; Zhang et al., 2024, "Negative Preference Optimization:
From Catastrophic Collapse to Effective Unlearning", arXiv 2404.05868).

L = -(2/beta) * mean_i log sigmoid(beta * (NLL_theta(y_i|x_i) - NLL_ref(y_i|x_i))) + alpha * L_retain

on forget pairs (x_i, y_i), NLL summed over answer tokens, pi_ref the model before unlearning
(a frozen copy, or the LoRA model with adapters disabled). Defaults (paper, open-unlearning
TOFU): beta = 0.1, alpha = 1, retain NLL.

Notes: docs/methods/npo.md
"""

from __future__ import annotations

from typing import Any

import torch

from trustlit.unlearning.base import PreferenceUnlearning
from trustlit.unlearning.losses import npo_loss, token_mean_nll


class NPO(PreferenceUnlearning):
    """NPO with a retain term (see the module docstring); arguments as :class:`PreferenceUnlearning`'s."""

    def preference_terms(self, batch: dict[str, Any]) -> dict[str, torch.Tensor]:
        forget = batch["forget"]
        logp, num_tokens = self.logprobs(forget)
        ref_logp, _ = self.reference.sequence_logprobs(forget)
        return {
            "preference": npo_loss(logp, ref_logp, self.hparams.beta),
            "forget_nll": token_mean_nll(logp, num_tokens),
        }
