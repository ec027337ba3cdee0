"""Baselines of the harmful-fine-tuning literature: SFT, Vaccine, Booster, Lisa and RepNoise.

Alignment-stage defenses (run on the alignment set before the user fine-tunes): :class:`Vaccine`,
:class:`Booster`, :class:`RepNoise`, and :class:`SFT` with ``part="align"`` as the undefended
alignment. Fine-tuning-stage defenses (run on the user's mixture): :class:`Lisa`, and :class:`SFT`
(``part="finetune"``) as the undefended fine-tuning, i.e. the attack. One class per method; each
docstring gives the formula with the symbols of the code and the released defaults.
"""

from __future__ import annotations

from typing import Any, Literal

import torch
from torch import nn

from trustlit.hparams import NonNegativeFloat, PositiveInt, check_arguments
from trustlit.llm import hooks
from trustlit.llm.anatomy import base_model, decoder_layers, mlp_down_projection, self_attention
from trustlit.llm.loading import CausalLMSpec
from trustlit.llm.prompts import IGNORE_INDEX
from trustlit.llm.scoring import answer_nll
from trustlit.safety.base import ManualStepMixin, SafetyModule
from trustlit.safety.losses import (
    answer_nll_from_hidden,
    answer_nll_from_logits,
    repnoise_loss,
    representation_noise_mmd,
)
from trustlit.safety.updates import (
    booster_update,
    parameter_gradients,
    perturbed,
    proximal_penalty,
    scaled_direction,
)
from trustlit.strategies import DDP, SINGLE_DEVICE

PARTS = ("finetune", "align", "harmful")
Part = Literal["finetune", "align", "harmful"]
LisaState = Literal["align", "finetune"]
LISA_CHECKPOINT_KEY = "lisa"


class SFT(SafetyModule):
    """Plain supervised fine-tuning on one batch part: L = NLL(part).

    ``part="finetune"`` fine-tunes on the user's mixture (the harmful fine-tuning attack, no
    defense); ``part="align"`` is the alignment stage without a defense (the SFT-aligned model
    the defenses are compared with). One backward per step, so it also runs under DDP.

    Notes: docs/methods/sft.md

    Args:
        part: the batch part to fit: ``finetune``, ``align`` or ``harmful``.
        Other arguments: see :class:`~trustlit.CausalLMModule`.
    """

    supported_strategies = (SINGLE_DEVICE, DDP)

    def __init__(self, lm: CausalLMSpec | None = None, part: Part = "finetune", **kwargs: Any) -> None:
        if part not in PARTS:
            raise ValueError(f"part must be one of {list(PARTS)}, got '{part}'")
        super().__init__(lm, **kwargs)
        self.required_parts = (part,)

    def training_step(self, batch: dict[str, Any], batch_idx: int) -> torch.Tensor:
        data = self.part(batch, self.hparams.part)
        loss = answer_nll(self.model, data)
        self.log_terms({"loss": loss}, data["input_ids"].size(0))
        return loss


class Vaccine(SafetyModule):
    """Vaccine: perturbation-aware alignment (Huang et al., "Vaccine: Perturbation-aware Alignment
    for Large Language Models against Harmful Fine-tuning Attack", NeurIPS 2024; code:
    github.com/git-disl/Vaccine).

    Alignment is made robust to the drift of hidden embeddings that later fine-tuning causes.
    With f the alignment loss (NLL on ``align``) and e_l the output of layer l's attention block,
    each step:

        g_l = d f / d e_l                                       (pass 1)
        eps_l = rho * g_l / (||(g_1, ..., g_L)||_2 + 1e-7)      (one global norm over all layers)
        w <- optimiser step along  grad_w f(w; e_l + eps_l for every l)   (pass 2)

    i.e. the gradient of the loss under the (first-order) worst-case embedding perturbation of norm rho.
    Default rho = 2 (the released ``train.py`` default).

    Notes: docs/methods/vaccine.md (the released alignment script's other settings)

    Args:
        rho: the radius of the embedding perturbation (0 is plain SFT on ``align``).
        Other arguments: see :class:`~trustlit.CausalLMModule`.
    """

    required_parts = ("align",)
    supported_strategies = (SINGLE_DEVICE, DDP)  # one backward per step

    def __init__(self, lm: CausalLMSpec | None = None, rho: NonNegativeFloat = 2.0, **kwargs: Any) -> None:
        check_arguments(Vaccine.__init__, locals())
        super().__init__(lm, **kwargs)

    def attention_blocks(self) -> list[nn.Module]:
        return [self_attention(layer) for layer in decoder_layers(self.model)]

    def perturbation(self, align: dict[str, Any]) -> tuple[list[torch.Tensor], torch.Tensor]:
        """Pass 1: (eps_1, ..., eps_L), each [B, T, D], and the unperturbed loss f (detached).

        d f / d e_l is read off a zero offset added to each attention output.
        """
        blocks = self.attention_blocks()
        weight = next(self.model.parameters())
        shape = (*align["input_ids"].shape, base_model(self.model).config.hidden_size)
        zeros = [torch.zeros(shape, dtype=weight.dtype, device=weight.device, requires_grad=True) for _ in blocks]
        with hooks.add(blocks, zeros):
            loss = answer_nll(self.model, align)
        grads = torch.autograd.grad(loss, zeros)
        return scaled_direction(grads, self.hparams.rho), loss.detach()

    def training_step(self, batch: dict[str, Any], batch_idx: int) -> torch.Tensor:
        align = self.part(batch, "align")
        perturbation, clean_loss = self.perturbation(align)
        with hooks.add(self.attention_blocks(), perturbation):
            loss = answer_nll(self.model, align)
        self.log_terms({"loss": loss, "clean_loss": clean_loss}, align["input_ids"].size(0))
        return loss


class Booster(ManualStepMixin, SafetyModule):
    """Booster: attenuating the harmful perturbation (Huang et al., "Booster: Tackling Harmful
    Fine-tuning for Large Language Models via Attenuating Harmful Perturbation", ICLR 2025; code:
    github.com/git-disl/Booster).

    With f the alignment loss (``align``) and h the harmful loss (``harmful``), Booster minimises
    f(w) + lambda * (h(w) - h(w - alpha * grad h(w) / ||grad h(w)||)): the harmful-loss reduction
    that one normalised harmful step would achieve is attenuated. Each step:

        w <- optimiser step along  grad f(w) + lambda * (grad h(w) - grad h(w - alpha * grad h(w) / ||grad h(w)||))

    (:func:`~trustlit.safety.updates.booster_update`; the simulated step is held fixed). Defaults
    lambda = 5, alpha = 0.1: the released ``script/alignment/smooth_align.sh``.

    Notes: docs/methods/booster.md

    Args:
        lam: lambda, weight of the attenuation term (0 is plain SFT on ``align``).
        alpha: the length of the simulated normalised harmful step.
        Other arguments: see :class:`~trustlit.CausalLMModule`.
    """

    required_parts = ("align", "harmful")

    def __init__(
        self, lm: CausalLMSpec | None = None, lam: NonNegativeFloat = 5.0, alpha: NonNegativeFloat = 0.1, **kwargs: Any
    ) -> None:
        check_arguments(Booster.__init__, locals())
        super().__init__(lm, **kwargs)

    def training_step(self, batch: dict[str, Any], batch_idx: int) -> torch.Tensor:
        align, harmful = self.part(batch, "align"), self.part(batch, "harmful")
        params = self.trainable_parameters()
        harmful_loss = answer_nll(self.model, harmful)
        harmful_grad = parameter_gradients(harmful_loss, params)
        step = [-d for d in scaled_direction(harmful_grad, self.hparams.alpha)]
        with perturbed(params, step):
            stepped_loss = answer_nll(self.model, harmful)
            stepped_grad = parameter_gradients(stepped_loss, params)
        loss = answer_nll(self.model, align)
        align_grad = parameter_gradients(loss, params)
        self.apply_update(params, booster_update(align_grad, harmful_grad, stepped_grad, self.hparams.lam))
        terms = {
            "loss": loss,
            "harmful_loss": harmful_loss,
            "stepped_harmful_loss": stepped_loss,
            "harmful_reduction": harmful_loss - stepped_loss,
        }
        self.log_terms(terms, align["input_ids"].size(0))
        return loss.detach()


def lisa_state(step: int, align_steps: int, finetune_steps: int) -> LisaState:
    """Lisa's state at optimiser step ``step``: cycles of ``align_steps`` then ``finetune_steps``."""
    return "align" if step % (align_steps + finetune_steps) < align_steps else "finetune"


class Lisa(SafetyModule):
    """Lisa: lazy safety alignment (Huang et al., "Lisa: Lazy Safety Alignment for Large Language
    Models against Harmful Fine-tuning Attack", NeurIPS 2024; code: github.com/git-disl/Lisa).

    Bi-state optimisation during fine-tuning: cycles of ``align_steps`` steps on the alignment
    set then ``finetune_steps`` steps on the user's data, starting with alignment. In state s,

        L_s(w) = NLL_s(w) + rho/2 * ||w - w_anchor||^2

    with w_anchor the weights at the last switch of state (at the start: the initial weights). The
    proximal term is left out during the first ``proximal_warmup`` fraction of the run's steps, as
    in the released ``LisaTrainer``. Defaults: the released ``script/finetune/lisa_poison_ratio.sh``:
    rho = 1, 100 alignment and 900 fine-tuning steps per cycle. The state and w_anchor are saved in
    checkpoints; ``train/state`` logs 0 for alignment, 1 for fine-tuning.

    Notes: docs/methods/lisa.md

    Args:
        rho: weight of the proximal term.
        align_steps: optimiser steps on ``align`` per cycle.
        finetune_steps: optimiser steps on ``finetune`` per cycle.
        proximal_warmup: fraction of the run's steps (``trainer.estimated_stepping_batches``)
            without the proximal term, in [0, 1).
        Other arguments: see :class:`~trustlit.CausalLMModule`.
    """

    required_parts = ("finetune", "align")
    supported_strategies = (SINGLE_DEVICE, DDP)  # one backward per step

    def __init__(
        self,
        lm: CausalLMSpec | None = None,
        rho: NonNegativeFloat = 1.0,
        align_steps: PositiveInt = 100,
        finetune_steps: PositiveInt = 900,
        proximal_warmup: NonNegativeFloat = 0.1,
        **kwargs: Any,
    ) -> None:
        check_arguments(Lisa.__init__, locals())
        if proximal_warmup >= 1:  # [0, 1): the type says >= 0
            raise ValueError(f"Lisa: proximal_warmup={proximal_warmup!r} is invalid, expected a number in [0, 1)")
        super().__init__(lm, **kwargs)
        self.state: LisaState | None = None
        self.anchor: list[torch.Tensor] | None = None

    def trainable_names(self) -> list[str]:
        return [name for name, p in self.model.named_parameters() if p.requires_grad]

    def update_state(self) -> None:
        """Enter the state of the current step; on a switch, w_anchor <- w."""
        state = lisa_state(self.trainer.global_step, self.hparams.align_steps, self.hparams.finetune_steps)
        if state != self.state:
            self.state = state
            self.anchor = [p.detach().clone() for p in self.trainable_parameters()]

    def proximal(self, params: list[nn.Parameter]) -> torch.Tensor:
        """rho/2 * ||w - w_anchor||^2; 0 during the first ``proximal_warmup`` of the run's steps."""
        warmup_steps = self.hparams.proximal_warmup * self.trainer.estimated_stepping_batches
        if warmup_steps == float("inf"):
            raise ValueError(
                "Lisa's proximal_warmup is a fraction of the run: set trainer.max_steps or trainer.max_epochs "
                "(or proximal_warmup=0)"
            )
        self.anchor = [a.to(p.device, p.dtype) for p, a in zip(params, self.anchor, strict=True)]
        if self.trainer.global_step < warmup_steps:
            return params[0].new_zeros(())
        return proximal_penalty(params, self.anchor, self.hparams.rho)

    def training_step(self, batch: dict[str, Any], batch_idx: int) -> torch.Tensor:
        parts = {name: self.part(batch, name) for name in self.required_parts}
        self.update_state()
        data = parts[self.state]
        nll = answer_nll(self.model, data)
        proximal = self.proximal(self.trainable_parameters())
        loss = nll + proximal
        state = nll.new_tensor(float(self.state == "finetune"))
        terms = {"loss": loss, f"{self.state}_nll": nll, "proximal": proximal, "state": state}
        self.log_terms(terms, data["input_ids"].size(0))
        return loss

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        anchor = None if self.anchor is None else dict(zip(self.trainable_names(), self.anchor, strict=True))
        checkpoint[LISA_CHECKPOINT_KEY] = {"state": self.state, "anchor": anchor}

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        if LISA_CHECKPOINT_KEY not in checkpoint:
            raise ValueError(
                f"the checkpoint has no '{LISA_CHECKPOINT_KEY}' entry (Lisa's state and anchor): it was not "
                "written by Lisa; to start Lisa from its weights, pass it as lm.name_or_path instead of ckpt_path"
            )
        saved = checkpoint[LISA_CHECKPOINT_KEY]
        self.state = saved["state"]
        anchor = saved["anchor"]
        self.anchor = None if anchor is None else [anchor[name] for name in self.trainable_names()]


def final_norm(model: nn.Module) -> nn.Module:
    """The norm before the LM head: ``model.norm`` (Llama family) or ``transformer.ln_f`` (GPT-2)."""
    decoder = base_model(model).get_decoder()
    for name in ("norm", "ln_f"):
        if (norm := getattr(decoder, name, None)) is not None:
            return norm
    raise ValueError(f"{type(decoder).__name__} has no final norm (norm or ln_f)")


class RepNoise(SafetyModule):
    """Representation Noising (Rosati et al., "Representation Noising: A Defence Mechanism Against
    Harmful Finetuning", NeurIPS 2024; code: github.com/domenicrosati/representation-noising,
    ``representation_noising/loss.py``).

    Harmful representations are pushed towards Gaussian noise at every layer, while the model
    keeps its harmless behaviour:

        L = L_harmless + beta * mean_l MMD^2(h_l * m, z_l * m) - alpha * log(L_harmful + 1)

    - L_harmless: NLL on ``align``;
    - h_l: the output of layer l's MLP on the ``harmful`` batch, z_l ~ N(0, I) of its shape, m the
      harmful answer tokens; each sequence flattened is one MMD sample
      (:func:`~trustlit.safety.losses.gaussian_kernel_mmd`: RBF kernels at 5 bandwidths, mul 2,
      around the mean pairwise distance);
    - L_harmful: the harmful NLL averaged over the logit lens of every hidden state,
      mean_{l=0..L} NLL(lm_head(norm(x_l))) with x_0 the embeddings and x_L's term the model's
      own logits (a plain mean).

    Defaults alpha = 1, beta = 0.001: the released ``rep_noise_loss``'s defaults.

    Notes: docs/methods/rep_noise.md (differences from the released code)

    Args:
        alpha: weight of the harmful ascent term.
        beta: weight of the noise (MMD) term.
        Other arguments: see :class:`~trustlit.CausalLMModule`.
    """

    required_parts = ("align", "harmful")
    supported_strategies = (SINGLE_DEVICE, DDP)  # one backward per step

    def __init__(
        self,
        lm: CausalLMSpec | None = None,
        alpha: NonNegativeFloat = 1.0,
        beta: NonNegativeFloat = 0.001,
        **kwargs: Any,
    ) -> None:
        check_arguments(RepNoise.__init__, locals())
        super().__init__(lm, **kwargs)

    def harmful_terms(self, harmful: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor]:
        """(L_harmful, mean_l MMD^2) from one forward on the harmful batch."""
        blocks = {str(i): mlp_down_projection(layer) for i, layer in enumerate(decoder_layers(self.model))}
        with hooks.capture(blocks) as mlp_outputs:
            output = self.model(
                input_ids=harmful["input_ids"], attention_mask=harmful["attention_mask"], output_hidden_states=True
            )
        head, norm = self.model.get_output_embeddings(), final_norm(self.model)
        labels = harmful["labels"]
        lens = [answer_nll_from_hidden(hidden, lambda x: head(norm(x)), labels) for hidden in output.hidden_states[:-1]]
        harmful_nll = torch.stack([*lens, answer_nll_from_logits(output.logits, labels)]).mean()
        noise = representation_noise_mmd([mlp_outputs[name] for name in blocks], labels != IGNORE_INDEX)
        return harmful_nll, noise

    def training_step(self, batch: dict[str, Any], batch_idx: int) -> torch.Tensor:
        align, harmful = self.part(batch, "align"), self.part(batch, "harmful")
        harmful_nll, noise = self.harmful_terms(harmful)
        harmless_nll = answer_nll(self.model, align)
        loss = repnoise_loss(harmless_nll, harmful_nll, noise, self.hparams.alpha, self.hparams.beta)
        terms = {"loss": loss, "harmless_nll": harmless_nll, "harmful_nll": harmful_nll, "noise_mmd": noise}
        self.log_terms(terms, align["input_ids"].size(0))
        return loss
