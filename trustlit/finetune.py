"""Supervised fine-tuning of a causal LM on QA pairs (the quickstart, and the TOFU step that
makes a model know the facts it will later unlearn).

Loss: the mean negative log-likelihood of the answer tokens of the batch,
L = -(1 / sum_i |y_i|) * sum_i sum_t log p_theta(y_i,t | x_i, y_i,<t); prompt tokens are masked.

Notes: docs/methods/causal_lm_fine_tuning.md
"""

from __future__ import annotations

from typing import Any

import torch

from trustlit.llm.module import CausalLMModule
from trustlit.llm.scoring import answer_nll


class CausalLMFineTuning(CausalLMModule):
    """Fine-tune on the answer tokens of QA batches (see :class:`CausalLMModule` for arguments)."""

    def training_step(self, batch: dict[str, Any], batch_idx: int) -> torch.Tensor:
        loss = answer_nll(self.model, batch)
        self.log("train/loss", loss, prog_bar=True, batch_size=batch["input_ids"].size(0))
        return loss
