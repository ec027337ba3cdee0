"""The unlearning objectives as pure functions of log-probabilities, logits and activations.

Notation (as in every method's docstring): for a QA pair (x, y), ``logp = log pi(y|x)`` is the
summed log-probability of the answer tokens, ``num_tokens = |y|``, so NLL(y|x) = -logp and the
length-normalised NLL is -logp / |y|. ``ref`` marks the frozen model before unlearning.
Inputs are per-sample tensors [B]; every loss returns a scalar averaged over the batch.
"""

from __future__ import annotations

from typing import Literal

import torch
import torch.nn.functional as F

from trustlit.llm.prompts import IGNORE_INDEX
from trustlit.llm.scoring import token_mean_nll

KLReduction = Literal["answer_tokens", "all_positions"]
KL_REDUCTIONS = ("answer_tokens", "all_positions")


def gradient_ascent_loss(logp: torch.Tensor, num_tokens: torch.Tensor) -> torch.Tensor:
    """GradAscent: L = -NLL_forget (token mean); minimising it raises the forget NLL."""
    return -token_mean_nll(logp, num_tokens)


def npo_loss(logp: torch.Tensor, ref_logp: torch.Tensor, beta: float) -> torch.Tensor:
    """NPO (Zhang et al., 2024): L = -(2/beta) * mean_i log sigmoid(beta * (NLL_theta_i - NLL_ref_i)).

    With NLL = -logp this is -(2/beta) * mean log sigmoid(-beta * log(pi_theta / pi_ref)).
    """
    return -(2.0 / beta) * F.logsigmoid(beta * (ref_logp - logp)).mean()


def simnpo_loss(logp: torch.Tensor, num_tokens: torch.Tensor, beta: float, gamma: float = 0.0) -> torch.Tensor:
    """SimNPO's forget term (Fan et al., NeurIPS 2025), as in the authors' released code.

    L = -(2/beta) * mean_i log sigmoid(beta * (NLL_theta_i / |y_i| - gamma)).

    The paper prints sigmoid(beta * NLL/|y| - gamma); the released code scales the margin by
    beta too, as here. The two agree for the released default gamma = 0.
    """
    return -(2.0 / beta) * F.logsigmoid(beta * (-logp / num_tokens.clamp(min=1) - gamma)).mean()


def dpo_loss(
    chosen_logp: torch.Tensor,
    rejected_logp: torch.Tensor,
    ref_chosen_logp: torch.Tensor,
    ref_rejected_logp: torch.Tensor,
    beta: float,
) -> torch.Tensor:
    """DPO with the (2/beta) scaling of the unlearning literature (IdkDPO: chosen = a refusal).

    L = -(2/beta) * mean_i log sigmoid(beta * [(logp_w - logp_w^ref) - (logp_l - logp_l^ref)]).
    """
    margin = (chosen_logp - ref_chosen_logp) - (rejected_logp - ref_rejected_logp)
    return -(2.0 / beta) * F.logsigmoid(beta * margin).mean()


def answer_token_mask(labels: torch.Tensor) -> torch.Tensor:
    """[B, T-1] bool: positions whose next token is an answer token (aligned with shifted logits)."""
    return labels[:, 1:] != IGNORE_INDEX


def check_kl_reduction(reduction: str) -> None:
    if reduction not in KL_REDUCTIONS:
        raise ValueError(f"kl_reduction must be one of {KL_REDUCTIONS}, got {reduction!r}")


def kl_to_reference(
    logits: torch.Tensor, ref_logits: torch.Tensor, labels: torch.Tensor, reduction: KLReduction = "answer_tokens"
) -> torch.Tensor:
    """KL(pi_ref || pi_theta) of the next-token distributions, summed over the vocabulary, then averaged.

    With kl_t = sum_v pi_ref(v|.) * (log pi_ref(v|.) - log pi_theta(v|.)) at position t of logits [B, T, V]:

    - ``answer_tokens``: mean of kl_t over the positions whose next token is an answer token
      (labels != IGNORE_INDEX), pooled over the batch;
    - ``all_positions``: sum of kl_t over all B*T positions of the padded batch (question, answer,
      padding, and the last position, whose next token is unknown) divided by B*T, as TOFU's ``KL``
      loss and open-unlearning's ``compute_kl_divergence`` compute it:
      ``F.kl_div(logq.view(-1, V), logp_ref.view(-1, V), reduction="batchmean", log_target=True)``.
    """
    check_kl_reduction(reduction)
    if reduction == "answer_tokens":
        mask = answer_token_mask(labels)
        logits, ref_logits = logits[:, :-1][mask], ref_logits[:, :-1][mask]
    logq = F.log_softmax(logits.float(), dim=-1)
    logp_ref = F.log_softmax(ref_logits.float(), dim=-1)
    return (logp_ref.exp() * (logp_ref - logq)).sum(-1).mean()


def masked_mean_squared_distance(activations: torch.Tensor, target: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Squared distance averaged over hidden units, then over each sample's masked tokens, then the batch.

    ``activations`` [B, T, D]; ``target`` broadcastable to it; ``mask`` [B, T] bool. This is
    RMU's MSE as open-unlearning computes it on answer tokens.
    """
    squared = (activations - target).pow(2).mean(-1) * mask
    return (squared.sum(1) / mask.sum(1).clamp(min=1)).mean()


def rmu_loss(
    forget_activations: torch.Tensor,
    forget_mask: torch.Tensor,
    retain_activations: torch.Tensor,
    frozen_retain_activations: torch.Tensor,
    retain_mask: torch.Tensor,
    control_vector: torch.Tensor,
    alpha: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """RMU (Li et al., 2024, WMDP): the forget and retain terms, (L_forget, L_retain).

    L = mean ||h_l(x_f) - c*u||^2 + alpha * mean ||h_l(x_r) - h_l^frozen(x_r)||^2, where
    ``control_vector`` is c*u (u a fixed random unit vector) and the means are over tokens and
    hidden units, as the released code's ``mse_loss``.
    """
    forget = masked_mean_squared_distance(forget_activations, control_vector, forget_mask)
    retain = masked_mean_squared_distance(retain_activations, frozen_retain_activations, retain_mask)
    return forget, alpha * retain
