"""The defenses' objectives as pure functions of logits, activations and scalar losses.

Notation as in :mod:`trustlit.safety.base`: NLL is the mean negative log-likelihood over the
answer tokens of a batch (prompt and padding positions never count).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
import torch.nn.functional as F

from trustlit.llm.prompts import IGNORE_INDEX
from trustlit.llm.scoring import sequence_logprobs_from_logits


def answer_nll_from_logits(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Mean NLL over all answer tokens of the batch, from logits [B, T, V] and labels [B, T]."""
    sum_logprob, num_tokens = sequence_logprobs_from_logits(logits, labels)
    return -sum_logprob.sum() / num_tokens.sum().clamp(min=1)


def answer_nll_from_hidden(
    hidden: torch.Tensor, head: Callable[[torch.Tensor], torch.Tensor], labels: torch.Tensor
) -> torch.Tensor:
    """``answer_nll_from_logits(head(hidden), labels)``, with ``head`` applied only where it counts.

    The head (e.g. final norm then LM head: a logit lens) maps hidden states [B, T, D] to logits;
    it runs only on the positions that predict an answer token, so no [B, T, V] logits are built
    (for a 49k-token vocabulary and every layer of a model, those dominate time and memory).
    """
    targets = labels[:, 1:]
    predicts_answer = targets != IGNORE_INDEX
    if not predicts_answer.any():
        return hidden.sum() * 0.0
    logits = head(hidden[:, :-1][predicts_answer])
    return F.cross_entropy(logits.float(), targets[predicts_answer])


def gaussian_kernel_mmd(x: torch.Tensor, y: torch.Tensor, kernel_mul: float = 2.0, kernel_num: int = 5) -> torch.Tensor:
    """Biased estimate of MMD^2(P, Q) from samples x [n, d] ~ P and y [m, d] ~ Q, multi-bandwidth RBF.

    MMD^2 = mean_{i,j} k(x_i, x_j) + mean_{i,j} k(y_i, y_j) - 2 * mean_{i,j} k(x_i, y_j), with
    k(a, b) = sum_{s=0}^{S-1} exp(-||a - b||^2 / (sigma^2 * mul^(s - S//2))),
    S = ``kernel_num``, mul = ``kernel_mul`` and sigma^2 the mean squared distance between distinct
    points of the pooled sample (held constant under differentiation). This is the kernel of
    RepNoise's released ``MMD_loss`` (representation_noising/loss.py: mul 2, 5 bandwidths).
    """
    pooled = torch.cat([x, y]).float()
    n = pooled.size(0)
    squared_norms = pooled.pow(2).sum(1)
    distances = (squared_norms[:, None] + squared_norms[None, :] - 2 * pooled @ pooled.T).clamp(min=0)
    sigma2 = (distances.detach().sum() / (n * n - n)).clamp(min=torch.finfo(distances.dtype).tiny)
    kernel = sum(torch.exp(-distances / (sigma2 * kernel_mul ** (s - kernel_num // 2))) for s in range(kernel_num))
    k = x.size(0)
    return kernel[:k, :k].mean() + kernel[k:, k:].mean() - 2 * kernel[:k, k:].mean()


def representation_noise_mmd(activations: Sequence[torch.Tensor], mask: torch.Tensor) -> torch.Tensor:
    """RepNoise's noise term: mean_l MMD^2(h_l * m, z_l * m), z_l ~ N(0, I) of h_l's shape.

    ``activations``: one [B, T, D] tensor per layer; ``mask`` [B, T] bool marks the positions
    that count (the harmful answer tokens). Masked-out positions are zero in both samples;
    each sequence, flattened to [T * D], is one point of the MMD (as the released code does).
    """
    keep = mask.unsqueeze(-1).float()
    terms = []
    for hidden in activations:
        masked = hidden.float() * keep
        noise = torch.randn_like(masked) * keep
        terms.append(gaussian_kernel_mmd(masked.flatten(1), noise.flatten(1)))
    return torch.stack(terms).mean()


def repnoise_loss(
    harmless_nll: torch.Tensor,
    harmful_nll: torch.Tensor,
    noise_mmd: torch.Tensor,
    alpha: float,
    beta: float,
) -> torch.Tensor:
    """RepNoise (Rosati et al., NeurIPS 2024): L = L_harmless + beta * MMD - alpha * log(L_harmful + 1).

    Minimising it fits the harmless data, pulls the harmful activations towards Gaussian noise
    and raises the harmful NLL (the log saturates the ascent as L_harmful grows).
    """
    return harmless_nll + beta * noise_mmd - alpha * torch.log(harmful_nll + 1)
