"""SimNPO (Fan et al., NeurIPS 2025, "Simplicity Prevails: Rethinking Negative Preference
Optimization for LLM Unlearning", arXiv 2410.07163).

NPO without a reference model, on the length-normalised likelihood:

L = -(2/beta) * mean_i log sigmoid(beta * (NLL_theta(y_i|x_i) / |y_i| - gamma)) * w_forget
    + w_retain * NLL_retain

with NLL summed over answer tokens and NLL_retain the token-mean NLL of the retain answers.
The margin gamma is scaled by beta, as in the authors' released code (the paper prints
sigmoid(beta * NLL/|y| - gamma)).

Released TOFU defaults: forget05 beta = 2.5, w_forget = 0.1375; forget10 beta = 4.5,
w_forget = 0.125; gamma = 0, w_retain = 1; lr 1e-5, 10 epochs, weight decay 0.01. The
constructor defaults are forget05's; the recipes set the others.

Notes: docs/methods/simnpo.md
"""

from __future__ import annotations

from typing import Any

import torch

from trustlit.hparams import NonNegativeFloat, PositiveFloat, check_arguments
from trustlit.llm.loading import CausalLMSpec
from trustlit.strategies import FSDP2
from trustlit.unlearning.base import UnlearningModule
from trustlit.unlearning.losses import simnpo_loss, token_mean_nll


class SimNPO(UnlearningModule):
    """SimNPO (see the module docstring); no reference forward is ever run.

    Args:
        beta: inverse temperature.
        gamma: reward margin (multiplied by beta, as in the released code).
        forget_weight: w_forget.
        retain_weight: w_retain.
        Other arguments: see :class:`~trustlit.CausalLMModule`.
    """

    # no reference model, no hooks: shards under FSDP2 (tests/test_strategies.py)
    supported_strategies = (*UnlearningModule.supported_strategies, FSDP2)

    def __init__(
        self,
        lm: CausalLMSpec | None = None,
        beta: PositiveFloat = 2.5,
        gamma: NonNegativeFloat = 0.0,
        forget_weight: NonNegativeFloat = 0.1375,
        retain_weight: NonNegativeFloat = 1.0,
        **kwargs: Any,
    ) -> None:
        check_arguments(SimNPO.__init__, locals())
        super().__init__(lm, **kwargs)

    def losses(self, batch: dict[str, Any]) -> dict[str, torch.Tensor]:
        logp, num_tokens = self.logprobs(batch["forget"])
        forget_term = simnpo_loss(logp, num_tokens, self.hparams.beta, self.hparams.gamma)
        retain = self.retain_loss(batch["retain"], "nll")
        loss = self.hparams.forget_weight * forget_term + self.hparams.retain_weight * retain
        return {
            "loss": loss,
            "simnpo": forget_term.detach(),
            "retain_nll": retain.detach(),
            "forget_nll": token_mean_nll(logp, num_tokens).detach(),
        }
