"""Per-token attribution baselines for hallucination tracing, on SAT's interface (prompt, target y_h).

Each method scores every token x_i of the prompt (the same tokens :func:`~trustlit.interpret.tracing.trace`
perturbs; the chat template around them is kept) for the target's log-probability
f(x) = log P(y_h | x) = sum_t log p(y_t | x, y_<t):

- ``occlusion`` (leave-one-out): a_i = f(x) - f(x without x_i), the token deleted;
- ``gradient_x_input`` (Shrikumar et al. 2017; Captum ``LayerGradientXActivation`` on the input
  embeddings): a_i = sum_d e_id * df/de_id;
- ``integrated_gradients`` (Sundararajan et al., ICML 2017, arXiv 1703.01365; Captum
  ``LayerIntegratedGradients``): a_i = sum_d (e_id - e'_id) * int_0^1 df/de_id(e' + a (e - e')) da, the
  baseline e' being the pad token's embedding at every prompt position (Riemann sum, ``n_steps`` = 50,
  Captum's default);
- ``attention_rollout`` (Abnar & Zuidema, ACL 2020, arXiv 2005.00928): per layer l the head-averaged
  attention with the residual, A~_l = normalise_rows(0.5 A_l + 0.5 I); R = A~_L ... A~_1; a_i = the mean
  of R[t, i] over the positions t that predict a target token. Gradient-free and target-agnostic except
  through those positions.

:func:`rank_spans` turns per-token scores into ranked subsequences by the beam search SAT uses (a span's
score is the sum of its tokens'), so every method is compared on the same footing.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Literal

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from trustlit.interpret.tracing import (
    PromptParts,
    TracedSubsequence,
    as_subsequences,
    beam_search,
    prompt_parts,
    target_logprobs,
)
from trustlit.llm.prompts import PromptFormat
from trustlit.llm.scoring import evaluating, model_device

Method = Literal["occlusion", "gradient_x_input", "integrated_gradients", "attention_rollout"]
METHODS: tuple[str, ...] = ("occlusion", "gradient_x_input", "integrated_gradients", "attention_rollout")


def _encode(
    tokenizer: PreTrainedTokenizerBase, prompt: str, target: str, prompt_format: str, answer_prefix: str = ""
) -> tuple[PromptParts, list[int]]:
    if not prompt or not prompt.strip():
        raise ValueError("token attribution: the prompt is empty; give the text whose tokens to score")
    if not target or not target.strip():
        raise ValueError("token attribution: the target is empty; give the output y_h to attribute")
    parts = prompt_parts(tokenizer, prompt, prompt_format)
    if answer_prefix:  # fixed answer text before the target, as in trace()
        parts.suffix = parts.suffix + tokenizer(answer_prefix, add_special_tokens=False)["input_ids"]
    return parts, tokenizer(target, add_special_tokens=False)["input_ids"]


def occlusion(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    prompt: str,
    target: str,
    *,
    prompt_format: PromptFormat = "auto",
    batch_size: int = 64,
    answer_prefix: str = "",
) -> torch.Tensor:
    """Leave-one-out scores [L]: log P(y_h | x) - log P(y_h | x with token i deleted) (``answer_prefix``: as in
    :func:`~trustlit.interpret.tracing.trace`)."""
    parts, target_ids = _encode(tokenizer, prompt, target, prompt_format, answer_prefix)
    x = parts.question
    variants = [x] + [x[:i] + x[i + 1 :] for i in range(len(x))]
    logp = target_logprobs(model, tokenizer, parts, variants, target_ids, batch_size)
    return logp[0] - logp[1:]


class _TargetLogProb:
    """f(input_ids) = log P(y_h | prompt) per row, for Captum: the target tokens sit at fixed positions."""

    def __init__(self, model: PreTrainedModel, prompt_length: int, target_ids: Sequence[int]) -> None:
        self.model = model
        self.start = prompt_length
        self.target = torch.tensor(target_ids, device=model_device(model))

    def __call__(self, input_ids: torch.Tensor) -> torch.Tensor:
        logits = self.model(input_ids=input_ids).logits.float()
        t = self.target.numel()
        logprobs = logits[:, self.start - 1 : self.start - 1 + t].log_softmax(-1)
        return logprobs.gather(-1, self.target.expand(input_ids.size(0), t).unsqueeze(-1)).squeeze(-1).sum(-1)


def _full_ids(parts: PromptParts, target_ids: Sequence[int], device: torch.device) -> tuple[torch.Tensor, slice]:
    ids = [*parts.prefix, *parts.question, *parts.suffix, *target_ids]
    start = len(parts.prefix)
    return torch.tensor([ids], device=device), slice(start, start + len(parts.question))


def _embedding_attribution(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    prompt: str,
    target: str,
    prompt_format: str,
    run: Callable[[object, torch.Tensor, torch.Tensor], torch.Tensor],
) -> torch.Tensor:
    parts, target_ids = _encode(tokenizer, prompt, target, prompt_format)
    ids, question = _full_ids(parts, target_ids, model_device(model))
    forward = _TargetLogProb(model, len(parts.prefix) + len(parts.question) + len(parts.suffix), target_ids)
    baseline = ids.clone()
    baseline[:, question] = tokenizer.pad_token_id
    was_training = model.training
    model.eval()
    try:
        attribution = run(forward, ids, baseline)  # [1, T, D]
    finally:
        model.train(was_training)
    return attribution[0, question].sum(-1).detach().float().cpu()


def gradient_x_input(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    prompt: str,
    target: str,
    *,
    prompt_format: PromptFormat = "auto",
) -> torch.Tensor:
    """Gradient x input scores [L]: sum_d e_id * d log P(y_h | x) / d e_id (Captum, input-embedding layer)."""
    from captum.attr import LayerGradientXActivation

    def run(forward: object, ids: torch.Tensor, baseline: torch.Tensor) -> torch.Tensor:
        return LayerGradientXActivation(forward, model.get_input_embeddings()).attribute(ids)

    return _embedding_attribution(model, tokenizer, prompt, target, prompt_format, run)


def integrated_gradients(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    prompt: str,
    target: str,
    *,
    prompt_format: PromptFormat = "auto",
    n_steps: int = 50,
    internal_batch_size: int | None = None,
) -> torch.Tensor:
    """Integrated Gradients scores [L] on the input embeddings, from the pad token's embedding (Captum)."""
    from captum.attr import LayerIntegratedGradients

    def run(forward: object, ids: torch.Tensor, baseline: torch.Tensor) -> torch.Tensor:
        method = LayerIntegratedGradients(forward, model.get_input_embeddings())
        return method.attribute(ids, baselines=baseline, n_steps=n_steps, internal_batch_size=internal_batch_size)

    return _embedding_attribution(model, tokenizer, prompt, target, prompt_format, run)


def rollout(attentions: Sequence[torch.Tensor]) -> torch.Tensor:
    """Attention rollout [T, T] of per-layer attentions [heads, T, T] (Abnar & Zuidema 2020):
    R = A~_L ... A~_1 with A~_l = normalise_rows(0.5 * mean_heads(A_l) + 0.5 * I)."""
    size = attentions[0].size(-1)
    eye = torch.eye(size, dtype=torch.float64)
    result = eye
    for attention in attentions:
        mixed = 0.5 * attention.double().mean(0) + 0.5 * eye
        mixed = mixed / mixed.sum(-1, keepdim=True)
        result = mixed @ result
    return result


def attention_rollout(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    prompt: str,
    target: str,
    *,
    prompt_format: PromptFormat = "auto",
) -> torch.Tensor:
    """Rollout scores [L]: mean over the target-predicting positions of the rolled-out attention to token i.

    Needs attention weights: the model runs with the eager attention implementation for this call.
    """
    parts, target_ids = _encode(tokenizer, prompt, target, prompt_format)
    ids, question = _full_ids(parts, target_ids, model_device(model))
    previous = model.config._attn_implementation
    model.set_attn_implementation("eager")
    try:
        with evaluating(model):
            attentions = model(input_ids=ids, output_attentions=True).attentions
    finally:
        model.set_attn_implementation(previous)
    matrix = rollout([a[0].cpu() for a in attentions])
    start = len(parts.prefix) + len(parts.question) + len(parts.suffix) - 1
    rows = matrix[start : start + len(target_ids)]
    return rows[:, question].mean(0).float()


def token_scores(
    method: Method,
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    prompt: str,
    target: str,
    *,
    prompt_format: PromptFormat = "auto",
) -> torch.Tensor:
    """The per-token scores [L] of one of :data:`METHODS`."""
    functions = {
        "occlusion": occlusion,
        "gradient_x_input": gradient_x_input,
        "integrated_gradients": integrated_gradients,
        "attention_rollout": attention_rollout,
    }
    if method not in functions:
        raise ValueError(f"unknown attribution method {method!r}: valid are {list(METHODS)}")
    return functions[method](model, tokenizer, prompt, target, prompt_format=prompt_format)


def rank_spans(
    tokenizer: PreTrainedTokenizerBase,
    token_ids: Sequence[int],
    scores: torch.Tensor,
    max_length: int,
    beam_width: int = 20,
) -> list[TracedSubsequence]:
    """Subsequences of ``token_ids`` (up to ``max_length`` tokens) ranked by the sum of their tokens' scores,
    grown by SAT's beam search; each iterates as ``(positions, score)``."""
    if scores.numel() != len(token_ids):
        raise ValueError(f"rank_spans: {scores.numel()} scores for {len(token_ids)} tokens")
    values = scores.double()

    def score_level(level: list[tuple[int, ...]]) -> torch.Tensor:
        return torch.stack([values[list(c)].sum() for c in level])

    ranked = beam_search(token_ids, score_level, beam_width, min(max_length, len(token_ids)), False)
    return as_subsequences(tokenizer, token_ids, ranked)
