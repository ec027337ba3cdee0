"""The base LightningModule of every causal-LM method: model, optimiser, memorisation metrics.

Subclasses define ``training_step``. Validation and test report, for each evaluation split
``s`` of the DataModule:

- ``{stage}/{s}/loss``: mean answer-token NLL;
- ``{stage}/{s}/answer_prob``: mean length-normalised answer probability P(y|x)^(1/|y|);
- ``{stage}/{s}/rougeL_recall``: mean ROUGE-L recall of greedy answers (when ``generate``).
"""

from __future__ import annotations

import math
from dataclasses import asdict
from typing import Any, Literal

import lightning as L
import torch

from trustlit.lm import generate_greedy, sequence_logprobs
from trustlit.metrics import answer_probability, rouge_l_recall
from trustlit.models import CausalLMSpec

LRSchedule = Literal["constant", "linear", "cosine"]


def lr_multiplier(step: int, warmup_steps: int, total_steps: int, schedule: LRSchedule) -> float:
    """Linear warm-up over ``warmup_steps``, then constant, linear or cosine decay to 0."""
    if step < warmup_steps:
        return (step + 1) / warmup_steps
    if schedule == "constant":
        return 1.0
    progress = min(1.0, (step - warmup_steps) / max(1, total_steps - warmup_steps))
    return 1.0 - progress if schedule == "linear" else 0.5 * (1.0 + math.cos(math.pi * progress))


class CausalLMModule(L.LightningModule):
    """Holds a causal LM and its tokenizer (``self.model``, ``self.tokenizer``).

    Args:
        lm: which model to load (:class:`~trustlit.models.CausalLMSpec`).
        lr, weight_decay: AdamW over the trainable parameters (all, or the LoRA adapters).
        warmup_steps, lr_schedule: linear warm-up, then ``constant``, ``linear`` or ``cosine``.
        generate: generate greedy answers during evaluation (for ROUGE-L).
        max_new_tokens: length limit of generated answers.
    """

    def __init__(
        self,
        lm: CausalLMSpec | None = None,
        lr: float = 1e-5,
        weight_decay: float = 0.01,
        warmup_steps: int = 0,
        lr_schedule: LRSchedule = "constant",
        generate: bool = True,
        max_new_tokens: int = 32,
    ) -> None:
        super().__init__()
        if lr <= 0:
            raise ValueError(f"lr must be positive, got {lr}")
        if warmup_steps < 0 or max_new_tokens < 1:
            raise ValueError(f"warmup_steps must be >= 0 and max_new_tokens >= 1, got {warmup_steps}, {max_new_tokens}")
        if lr_schedule not in ("constant", "linear", "cosine"):
            raise ValueError(f"lr_schedule must be 'constant', 'linear' or 'cosine', got '{lr_schedule}'")
        lm = CausalLMSpec(**lm) if isinstance(lm, dict) else (lm or CausalLMSpec())
        self.save_hyperparameters()
        self.hparams["lm"] = asdict(lm)  # plain data in hparams.yaml and in checkpoints
        self.model, self.tokenizer = lm.load()

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        return self.model(input_ids=input_ids, attention_mask=attention_mask).logits

    def configure_optimizers(self) -> dict[str, Any]:
        trainable = [p for p in self.model.parameters() if p.requires_grad]
        decay = [p for p in trainable if p.ndim >= 2]
        no_decay = [p for p in trainable if p.ndim < 2]  # biases and norms, as in HF's Trainer
        optimizer = torch.optim.AdamW(
            [{"params": decay, "weight_decay": self.hparams.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
            lr=self.hparams.lr,
        )
        total = self.trainer.estimated_stepping_batches if self._trainer is not None else 1
        unbounded = self._trainer is not None and self.trainer.max_steps == -1 and self.trainer.max_epochs in (None, -1)
        if self.hparams.lr_schedule != "constant" and unbounded:
            raise ValueError(
                f"lr_schedule='{self.hparams.lr_schedule}' decays over the run: set trainer.max_epochs or "
                "trainer.max_steps (or use lr_schedule='constant')"
            )
        scheduler = torch.optim.lr_scheduler.LambdaLR(
            optimizer,
            lambda step: lr_multiplier(step, self.hparams.warmup_steps, int(total), self.hparams.lr_schedule),
        )
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}

    def evaluate_batch(self, batch: dict[str, Any], stage: str) -> dict[str, torch.Tensor]:
        """Log the memorisation metrics of one evaluation batch; return per-sample values."""
        sum_logprob, num_tokens = sequence_logprobs(self.model, batch)
        values = {
            "loss": -sum_logprob / num_tokens,
            "answer_prob": answer_probability(sum_logprob, num_tokens),
        }
        if self.hparams.generate:
            answers = generate_greedy(self.model, self.tokenizer, batch, self.hparams.max_new_tokens)
            rouge = [rouge_l_recall(a, ref) for a, ref in zip(answers, batch["answer"], strict=True)]
            values["rougeL_recall"] = torch.tensor(rouge, device=sum_logprob.device)
        for name, value in values.items():
            self.log(
                f"{stage}/{batch['split']}/{name}",
                value.mean(),
                batch_size=len(value),
                add_dataloader_idx=False,
                sync_dist=True,
            )
        return values

    def validation_step(self, batch: dict[str, Any], batch_idx: int, dataloader_idx: int = 0) -> None:
        self.evaluate_batch(batch, "val")

    def test_step(self, batch: dict[str, Any], batch_idx: int, dataloader_idx: int = 0) -> None:
        self.evaluate_batch(batch, "test")

    def predict_step(self, batch: dict[str, Any], batch_idx: int, dataloader_idx: int = 0) -> list[dict[str, Any]]:
        answers = generate_greedy(self.model, self.tokenizer, batch, self.hparams.max_new_tokens)
        return [
            {"index": int(i), "question": q, "answer": ref, "generated": a}
            for i, q, ref, a in zip(batch["index"], batch["question"], batch["answer"], answers, strict=True)
        ]
