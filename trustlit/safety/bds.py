"""BDS: the Bayesian Data Scheduler against harmful fine-tuning.

Hu et al., "Adaptive Defense against Harmful Fine-Tuning for Large Language Models via Bayesian
Data Scheduler", NeurIPS 2025 (code: github.com/Egg-Hu/Bayesian-Data-Scheduler).

Every sample j of the fine-tuning mixture (N samples) has a safety attribute, its weight w_j,
inferred from the fine-tuning and the alignment data. Each step draws an alignment batch and a
fine-tuning batch of B samples with per-sample losses l_j (token-mean NLL of the response):

    model step, w fixed:       L(theta) = mean_a L_align,a(theta) + (1/B) sum_j w_j * l_j(theta)
    scheduler step, theta fixed:  S(z)  = (1/B) sum_j w_j(z) * l_j            (l_j detached)

S moves weight away from samples the aligned model finds costly to fit: with w = n * softmax(z),
dS/dz_j = (w_j / B) * (l_j - (1/n) sum_{i in batch} w_i l_i) for j in the batch, so a sample whose
loss is above the weighted batch term loses weight. Two schedulers:

- ``scalar`` (the released default): one logit per sample, w = N * softmax(z) over the whole
  mixture; z starts equal, so every weight starts at 1 and the weights always sum to N.
- ``neural``, the amortized scheduler: z_j = f(x_j), an MLP on the sample's mean-pooled final
  hidden state (detached) from the model's own forward, and w = B * softmax(z) over the batch.
  It scores samples it never saw (:meth:`BDS.score`); f is trained by S on the features of the
  model being fine-tuned.

``entropy_weight`` lambda_H adds lambda_H * sum_i p_i log p_i (p = w / n, over the softmax's
support: the mixture for ``scalar``, the batch for ``neural``) to S. Both default to 0, as released.

Posterior sampling (the paper's SGLD; the released code only optimises). The scheduler's energy is S
on the dataset scale plus a Gaussian log-prior on its parameters phi (z, or f's weights):

    U(phi) = N * S(phi) + ||phi||^2 / (2 sigma^2)          (sigma = ``scheduler_prior_std``; None: flat)

``langevin_temperature`` T = 0 (default, released) minimises U / N with AdamW (= S when there is no
prior). T > 0 samples p(phi) ∝ exp(-U / T) with preconditioned SGLD (Li et al. 2016,
:class:`~trustlit.safety.updates.PSGLD`; step size ``scheduler_lr``, no gradient clipping, the
Gamma correction dropped): T = 1 is the posterior, T < 1 a sharpened one. Its drift per step is
about lr * N / 2 per coordinate, so a pSGLD lr is about 1/N of an AdamW one.

Released defaults: scheduler AdamW lr 5e-3, betas (0.9, 0.95), no weight decay, gradient norm
clipped at 10; model lr 1e-5. The weights are logged every epoch and saved with the checkpoint
(``data_scheduler.*`` in the state dict).

Notes: docs/methods/bds.md (differences from the released code, our choices)
"""

from __future__ import annotations

import math
from typing import Any, Literal

import torch
from lightning.pytorch.loggers import TensorBoardLogger, WandbLogger
from torch import nn

from trustlit.hparams import NonNegativeFloat, PositiveFloat, PositiveInt, check_arguments
from trustlit.llm.loading import CausalLMSpec
from trustlit.llm.scoring import eval_mode, sequence_logprobs_from_logits
from trustlit.metrics.safety import weight_auroc
from trustlit.safety.base import ManualStepMixin, SafetyModule
from trustlit.safety.updates import (
    PSGLD,
    dataset_energy,
    negative_entropy,
    schedule_weights,
    weighted_finetune_loss,
)

SchedulerKind = Literal["scalar", "neural"]


def mean_pool(hidden: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """Mean of the hidden states [B, T, d] over the attended positions: [B, d]."""
    mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
    return (hidden * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1)


class ScalarScheduler(nn.Module):
    """One logit per fine-tuning sample; w = N * softmax(z) over all N samples."""

    def __init__(self, num_samples: int) -> None:
        super().__init__()
        self.logits = nn.Parameter(torch.zeros(num_samples))

    def all_weights(self) -> torch.Tensor:
        return schedule_weights(self.logits)

    def batch_weights(self, index: torch.Tensor, features: torch.Tensor) -> torch.Tensor:
        return self.all_weights()[index]


class NeuralScheduler(nn.Module):
    """The amortized scheduler: z = MLP(features) per sample; w = B * softmax(z) over the batch."""

    def __init__(self, feature_size: int, hidden_size: int = 64) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(feature_size, hidden_size), nn.Tanh(), nn.Linear(hidden_size, 1))
        nn.init.zeros_(self.net[-1].weight)  # z starts equal: every weight starts at 1
        nn.init.zeros_(self.net[-1].bias)

    def logits(self, features: torch.Tensor) -> torch.Tensor:
        return self.net(features.float()).squeeze(-1)

    def batch_weights(self, index: torch.Tensor, features: torch.Tensor) -> torch.Tensor:
        return schedule_weights(self.logits(features))


class BDS(ManualStepMixin, SafetyModule):
    """Fine-tune on ``finetune`` with per-sample weights inferred by a data scheduler (module docstring).

    Args:
        scheduler: ``scalar`` (one logit per sample) or ``neural`` (amortized, transfers to new data).
        scheduler_lr: lr of the scheduler's AdamW (released: 5e-3), or pSGLD's step size when T > 0.
        scheduler_grad_clip: gradient-norm clip of the scheduler step (released: 10).
        langevin_temperature: T; 0 optimises the scheduler with AdamW (released), T > 0 samples
            exp(-U / T) with pSGLD (T = 1: the posterior).
        scheduler_prior_std: sigma of the N(0, sigma^2) prior on the scheduler's parameters in U
            (None: flat, as released).
        entropy_weight: lambda_H, weight of the negative entropy of the weights in the scheduler loss.
        neural_hidden_size: width of the neural scheduler's MLP.
        num_samples: N, the size of the fine-tuning mixture; read from the data module's
            ``finetune_size`` at fit when not given (and then saved in the hyperparameters). The
            scalar scheduler needs it, the neural one for U (T > 0 or a prior).
        Other arguments: see :class:`~trustlit.CausalLMModule` (lr defaults to the released 1e-5).
    """

    required_parts = ("finetune", "align")

    def __init__(
        self,
        lm: CausalLMSpec | None = None,
        scheduler: SchedulerKind = "scalar",
        scheduler_lr: PositiveFloat = 5e-3,
        scheduler_grad_clip: PositiveFloat = 10.0,
        langevin_temperature: NonNegativeFloat = 0.0,
        scheduler_prior_std: PositiveFloat | None = None,
        entropy_weight: NonNegativeFloat = 0.0,
        neural_hidden_size: PositiveInt = 64,
        num_samples: PositiveInt | None = None,
        lr: PositiveFloat = 1e-5,
        **kwargs: Any,
    ) -> None:
        if scheduler not in ("scalar", "neural"):
            raise ValueError(f"scheduler must be 'scalar' or 'neural', got '{scheduler}'")
        check_arguments(BDS.__init__, locals())
        if not math.isfinite(langevin_temperature):
            raise ValueError(f"BDS: langevin_temperature={langevin_temperature!r} is invalid, expected a finite number")
        super().__init__(lm, lr=lr, **kwargs)
        self.data_scheduler: ScalarScheduler | NeuralScheduler | None = None
        if scheduler == "neural":
            self.data_scheduler = NeuralScheduler(self.model.config.hidden_size, neural_hidden_size)
        elif num_samples is not None:
            self.data_scheduler = ScalarScheduler(num_samples)

    def setup(self, stage: str) -> None:
        super().setup(stage)
        if stage != "fit":
            return
        if self.hparams.num_samples is None:
            size = getattr(self.trainer.datamodule, "finetune_size", None)
            if size is not None:
                self.hparams["num_samples"] = int(size)
        if self.hparams.num_samples is None and (self.data_scheduler is None or self.uses_energy):
            raise ValueError(
                f"BDS(scheduler='{self.hparams.scheduler}', langevin_temperature={self.hparams.langevin_temperature}, "
                f"scheduler_prior_std={self.hparams.scheduler_prior_std}) needs num_samples (N), or a data module "
                "with finetune_size"
            )
        if self.data_scheduler is None:
            self.data_scheduler = ScalarScheduler(self.hparams.num_samples).to(self.device)

    @property
    def uses_energy(self) -> bool:
        """Whether the scheduler step needs U on the dataset scale (pSGLD, or a prior)."""
        return self.hparams.langevin_temperature > 0 or self.hparams.scheduler_prior_std is not None

    def configure_optimizers(self) -> tuple[list[torch.optim.Optimizer], list[dict[str, Any]]]:
        model = super().configure_optimizers()
        hp, params = self.hparams, self.data_scheduler.parameters()
        if hp.langevin_temperature > 0:
            scheduler_optimizer = PSGLD(params, hp.scheduler_lr, hp.langevin_temperature, hp.num_samples)
        else:
            scheduler_optimizer = torch.optim.AdamW(params, lr=hp.scheduler_lr, betas=(0.9, 0.95), weight_decay=0.0)
        return [model["optimizer"], scheduler_optimizer], [model["lr_scheduler"]]

    def forward_with_features(self, part: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor]:
        """Logits [B, T, V] and each sample's mean-pooled final hidden state [B, d] (detached), one forward."""
        output = self.model(
            input_ids=part["input_ids"], attention_mask=part["attention_mask"], output_hidden_states=True
        )
        return output.logits, mean_pool(output.hidden_states[-1], part["attention_mask"]).detach()

    def sample_losses(self, part: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor]:
        """Token-mean NLL of each sample's response [B] and its features [B, d]."""
        logits, features = self.forward_with_features(part)
        sum_logprob, num_tokens = sequence_logprobs_from_logits(logits, part["labels"])
        return -sum_logprob / num_tokens.clamp(min=1), features

    def training_step(self, batch: dict[str, Any], batch_idx: int) -> torch.Tensor:
        finetune = self.part(batch, "finetune")
        align_loss = self.part_loss(batch, "align")
        losses, features = self.sample_losses(finetune)
        model_optimizer, scheduler_optimizer = self.optimizers()

        weights = self.data_scheduler.batch_weights(finetune["index"], features)
        loss = align_loss + weighted_finetune_loss(losses, weights.detach())
        model_optimizer.zero_grad(set_to_none=True)
        self.manual_backward(loss)
        model_optimizer.step()
        self.lr_schedulers().step()

        scheduler_loss = weighted_finetune_loss(losses.detach(), weights)
        regulariser = scheduler_loss.new_zeros(())
        if self.hparams.entropy_weight > 0:
            support = self.data_scheduler.all_weights() if isinstance(self.data_scheduler, ScalarScheduler) else weights
            regulariser = self.hparams.entropy_weight * negative_entropy(support)
        scheduler_optimizer.zero_grad(set_to_none=True)
        self.manual_backward(self.scheduler_objective(scheduler_loss, regulariser))
        if self.hparams.langevin_temperature == 0:  # clipping would change pSGLD's drift, not its noise
            nn.utils.clip_grad_norm_(self.data_scheduler.parameters(), self.hparams.scheduler_grad_clip)
        # the wrapped torch optimizer: Lightning counts every LightningOptimizer.step as a global step,
        # and a training step of BDS is one step (max_steps, lr schedules and logging count model steps)
        scheduler_optimizer.optimizer.step()

        terms = {
            "loss": loss,
            "align_loss": align_loss,
            "finetune_loss": losses.mean(),
            "scheduler_loss": scheduler_loss + regulariser,
            "batch_weight_min": weights.min(),
        }
        self.log_terms(terms, losses.size(0))
        return loss.detach()

    def scheduler_objective(self, scheduler_loss: torch.Tensor, regulariser: torch.Tensor) -> torch.Tensor:
        """What the scheduler step descends: U = N S + R + prior for pSGLD (T > 0), U / N for AdamW; without a
        prior that is S + R, the released objective. The entropy regulariser R is a term on the whole mixture's
        weights, not a per-sample likelihood, so it enters U once and is not scaled by N."""
        hp = self.hparams
        if not self.uses_energy:
            return scheduler_loss + regulariser
        params = list(self.data_scheduler.parameters())
        energy = dataset_energy(scheduler_loss, params, hp.num_samples, hp.scheduler_prior_std) + regulariser
        return energy if hp.langevin_temperature > 0 else energy / hp.num_samples

    @torch.no_grad()
    def score(self, part: dict[str, Any]) -> torch.Tensor:
        """The neural scheduler's logits z = f(x) for a batch of token ids (samples it may never have seen)."""
        if not isinstance(self.data_scheduler, NeuralScheduler):
            raise ValueError("BDS.score needs scheduler='neural' (a scalar scheduler only knows its own samples)")
        with eval_mode(self.model):
            _, features = self.forward_with_features(part)
        return self.data_scheduler.logits(features)

    @torch.no_grad()
    def all_weights(self) -> torch.Tensor:
        """w over the whole mixture (sums to N), in the mixture's order."""
        if isinstance(self.data_scheduler, ScalarScheduler):
            return self.data_scheduler.all_weights()
        datamodule = self.trainer.datamodule
        logits = torch.cat([self.score(part) for part in datamodule.finetune_batches(self.device)])
        return schedule_weights(logits)

    def on_train_epoch_end(self) -> None:
        weights = self.all_weights().cpu()
        flags = getattr(self.trainer.datamodule, "finetune_harmful", None)
        stats = {"weights/min": weights.min(), "weights/max": weights.max()}
        if flags is not None and 0 < int(flags.sum()) < len(flags):
            stats |= {
                "weights/harmful_mean": weights[flags].mean(),
                "weights/benign_mean": weights[~flags].mean(),
                "weights/auroc": torch.tensor(weight_auroc(weights, flags)),
            }
        for name, value in stats.items():
            self.log(name, value)
        self.log_histogram(weights)

    def log_histogram(self, weights: torch.Tensor) -> None:
        for logger in self.loggers:
            if isinstance(logger, WandbLogger):
                import wandb

                logger.experiment.log({"weights/histogram": wandb.Histogram(weights.numpy())}, commit=False)
            elif isinstance(logger, TensorBoardLogger):
                logger.experiment.add_histogram("weights/histogram", weights, self.global_step)
