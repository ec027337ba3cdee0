"""Gradient ascent on the forget set (GA), the simplest unlearning baseline (Jang et al., "Knowledge
Unlearning for Mitigating Privacy Risks in Language Models", ACL 2023, arXiv 2210.01504; TOFU's
``grad_ascent``).

L = -NLL_forget, the token-mean answer NLL of the forget batch negated: minimising it pushes
the forget answers' likelihood down without bound, so GA degrades the model if run long.

Notes: docs/methods/grad_ascent.md
"""

from __future__ import annotations

from typing import Any

import torch

from trustlit.strategies import FSDP2
from trustlit.unlearning.base import UnlearningModule
from trustlit.unlearning.losses import gradient_ascent_loss


class GradAscent(UnlearningModule):
    """L = -NLL_forget (see the module docstring); arguments as :class:`UnlearningModule`'s."""

    # no reference model, no hooks: shards under FSDP2 (tests/test_strategies.py)
    supported_strategies = (*UnlearningModule.supported_strategies, FSDP2)

    def losses(self, batch: dict[str, Any]) -> dict[str, torch.Tensor]:
        loss = gradient_ascent_loss(*self.logprobs(batch["forget"]))
        return {"loss": loss, "forget_nll": -loss.detach()}
