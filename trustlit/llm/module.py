"""The base LightningModule of every causal-LM method: model, optimiser, memorisation metrics.

Subclasses define ``training_step``. Validation and test report, for each evaluation split
``s`` of the DataModule:

- ``{stage}/{s}/loss``: mean answer-token NLL;
- ``{stage}/{s}/answer_prob``: mean length-normalised answer probability P(y|x)^(1/|y|);
- ``{stage}/{s}/rougeL_recall``: mean ROUGE-L recall of greedy answers (when ``generate``), stemmed as
  TOFU scores it (:func:`~trustlit.metrics.text.rouge_l_recall`).
"""

from __future__ import annotations

import math
from dataclasses import asdict
from typing import Any, Literal

import lightning as L
import torch
from lightning.pytorch.strategies import ModelParallelStrategy
from torch import nn
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.fsdp import FSDPModule, fully_shard

from trustlit.hparams import (
    NonNegativeFloat,
    NonNegativeInt,
    PositiveFloat,
    PositiveInt,
    check_arguments,
    plain_numbers,
)
from trustlit.llm.anatomy import base_model, decoder_layers
from trustlit.llm.loading import CausalLMSpec
from trustlit.llm.scoring import generate_greedy, sequence_logprobs
from trustlit.metrics.text import answer_probability, rouge_l_recall

LRSchedule = Literal["constant", "linear", "cosine"]


def lr_multiplier(step: int, warmup_steps: int, total_steps: int, schedule: LRSchedule) -> float:
    """Linear warm-up over ``warmup_steps``, then constant, linear or cosine decay to 0."""
    if step < warmup_steps:
        return (step + 1) / warmup_steps
    if schedule == "constant":
        return 1.0
    progress = min(1.0, (step - warmup_steps) / max(1, total_steps - warmup_steps))
    return 1.0 - progress if schedule == "linear" else 0.5 * (1.0 + math.cos(math.pi * progress))


def shard_decoder(model: nn.Module, mesh: DeviceMesh) -> None:
    """FSDP2: shard every decoder block, then the root (embeddings, final norm, LM head), over ``mesh``.

    One ``fully_shard`` per block makes a block the unit of all-gather and reshard, as FSDP's
    auto-wrap of the decoder layer class does. Generation is marked as FSDP-managed so that
    ``generate`` keeps the ranks in step (``synced_gpus``) when their answers end at different
    lengths: every forward is a collective.
    """
    for layer in decoder_layers(model):
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    base_model(model)._is_fsdp_managed_module = True  # read by transformers' generate


class CausalLMModule(L.LightningModule):
    """Holds a causal LM and its tokenizer (``self.model``, ``self.tokenizer``).

    Args:
        lm: which model to load (:class:`~trustlit.llm.loading.CausalLMSpec`).
        lr, weight_decay: AdamW over the trainable parameters (all, or the LoRA adapters).
        warmup_steps, lr_schedule: linear warm-up, then ``constant``, ``linear`` or ``cosine``.
        generate: generate greedy answers during evaluation (for ROUGE-L).
        max_new_tokens: length limit of generated answers.
    """

    def __init__(
        self,
        lm: CausalLMSpec | None = None,
        lr: PositiveFloat = 1e-5,
        weight_decay: NonNegativeFloat = 0.01,
        warmup_steps: NonNegativeInt = 0,
        lr_schedule: LRSchedule = "constant",
        generate: bool = True,
        max_new_tokens: PositiveInt = 32,
    ) -> None:
        super().__init__()
        check_arguments(CausalLMModule.__init__, locals())
        if lr_schedule not in ("constant", "linear", "cosine"):
            raise ValueError(f"lr_schedule must be 'constant', 'linear' or 'cosine', got '{lr_schedule}'")
        lm = CausalLMSpec.coerce(lm)
        self.save_hyperparameters()
        plain_numbers(self.hparams)
        self.hparams["lm"] = asdict(lm)  # plain data in hparams.yaml and in checkpoints
        # Loaded eagerly, whole, on every rank: fine for small models, which configure_model then
        # shards. Models too large for one process's memory would want meta-device init in
        # configure_model (Strategy.tensor_init_context(empty_init=True)) and sharded weight loading.
        self.model, self.tokenizer = lm.load()
        # from_pretrained returns a model in eval mode and Lightning keeps submodules' modes at fit
        # start: without this, a pretrained model would fine-tune with its dropout switched off
        self.model.train()

    def configure_model(self) -> None:
        """Under ``ModelParallelStrategy`` (``configs/strategy/fsdp2_cpu.yaml``), shard with FSDP2.

        Lightning calls this before ``configure_optimizers``, so the optimiser sees the sharded
        parameters; it is called again by each later fit/validate/test on the same module,
        hence the early return once sharded. Other strategies leave the model as it is (FSDP1's
        ``FSDPStrategy`` wraps it by its ``auto_wrap_policy``).
        """
        if self._trainer is None or not isinstance(self.trainer.strategy, ModelParallelStrategy):
            return
        if isinstance(self.model, FSDPModule):
            return
        shard_decoder(self.model, self.device_mesh["data_parallel"])

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
        unbounded = self._trainer is not None and self.trainer.max_steps == -1 and self.trainer.max_epochs in (None, -1)
        if self.hparams.lr_schedule != "constant" and unbounded:
            raise ValueError(
                f"lr_schedule='{self.hparams.lr_schedule}' decays over the run: set trainer.max_epochs or "
                "trainer.max_steps (or use lr_schedule='constant')"
            )
        warmup, schedule = self.hparams.warmup_steps, self.hparams.lr_schedule

        def multiplier(step: int) -> float:
            # The run's length is read only once past warm-up (before it, lr_multiplier does not use it),
            # not here: reading trainer.estimated_stepping_batches in configure_optimizers builds the train
            # loader before a checkpoint is restored, and Lightning 2.6 then never gives the loader its
            # saved position, so a mid-epoch resume would replay the epoch (Lightning-AI/pytorch-lightning#20550).
            past_warmup = step > warmup and self._trainer is not None
            total = int(self.trainer.estimated_stepping_batches) if past_warmup else 1
            return lr_multiplier(step, warmup, total, schedule)

        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, multiplier)
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
            rouge = [rouge_l_recall(a, ref, stem=True) for a, ref in zip(answers, batch["answer"], strict=True)]
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
