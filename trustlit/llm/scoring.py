"""Scoring text with a causal LM: token NLLs, sequence log-probabilities, greedy answers.

For a QA pair (x, y) encoded by :mod:`trustlit.llm.prompts`, ``sequence_logprobs`` gives
``sum_t log p(y_t | x, y_<t)`` and ``|y|``; ``token_mean_nll`` is the batch's mean NLL per answer
token, -sum_i logp_i / sum_i |y_i|. The ``*_nll`` helpers over many pairs run in eval mode without
gradients on the model's device, in batches of ``collate_qa``.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import torch
import torch.nn.functional as F
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from trustlit.llm.prompts import IGNORE_INDEX, collate_qa, encode_qa, stop_token_ids


def token_nll(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Per-token negative log-likelihood [B, T-1] of ``labels`` shifted by one; 0 where masked.

    Computed in float32 through ``cross_entropy``, which fuses the log-softmax (autograd still keeps
    the float32 copy of the logits).
    """
    shifted_logits = logits[:, :-1].float()
    shifted_labels = labels[:, 1:]
    nll = F.cross_entropy(
        shifted_logits.reshape(-1, shifted_logits.size(-1)),
        shifted_labels.reshape(-1),
        ignore_index=IGNORE_INDEX,
        reduction="none",
    )
    return nll.view(shifted_labels.shape)


def sequence_logprobs_from_logits(logits: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(sum_logprob, num_answer_tokens)`` per sample: sum_t log p(y_t | x, y_<t) and |y|."""
    num_tokens = (labels[:, 1:] != IGNORE_INDEX).sum(dim=1)
    return -token_nll(logits, labels).sum(dim=1), num_tokens


def sequence_logprobs(model: PreTrainedModel, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """One forward pass: summed answer log-probability and answer length for each sample."""
    logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
    return sequence_logprobs_from_logits(logits, batch["labels"])


def token_mean_nll(logp: torch.Tensor, num_tokens: torch.Tensor) -> torch.Tensor:
    """Mean NLL over all answer tokens of the batch: -sum_i logp_i / sum_i |y_i| (the usual fine-tuning loss)."""
    return -logp.sum() / num_tokens.sum().clamp(min=1)


def answer_nll(model: PreTrainedModel, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """:func:`token_mean_nll` of one forward pass over ``batch``."""
    return token_mean_nll(*sequence_logprobs(model, batch))


@contextmanager
def eval_mode(model: torch.nn.Module) -> Iterator[None]:
    """The model in eval mode (no dropout) inside; its previous train/eval mode comes back on exit."""
    was_training = model.training
    model.eval()
    try:
        yield
    finally:
        model.train(was_training)


@torch.no_grad()
def generate_greedy(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    batch: dict[str, torch.Tensor],
    max_new_tokens: int = 32,
) -> list[str]:
    """Greedy answers to the batch's left-padded prompts, decoded without special tokens."""
    prompt_ids = batch["prompt_input_ids"]
    output = model.generate(
        input_ids=prompt_ids,
        attention_mask=batch["prompt_attention_mask"],
        max_new_tokens=max_new_tokens,
        do_sample=False,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=stop_token_ids(tokenizer),
    )
    return tokenizer.batch_decode(output[:, prompt_ids.size(1) :], skip_special_tokens=True)


@contextmanager
def evaluating(model: torch.nn.Module) -> Iterator[None]:
    """Eval mode without gradients; the previous train/eval mode comes back afterwards."""
    with eval_mode(model), torch.no_grad():
        yield


def model_device(model: torch.nn.Module) -> torch.device:
    return next(model.parameters()).device


def encode_pairs(
    tokenizer: PreTrainedTokenizerBase,
    questions: Sequence[str],
    answers: Sequence[str],
    prompt_format: str,
    max_length: int,
) -> list[dict[str, Any]]:
    """:func:`~trustlit.llm.prompts.encode_qa` samples, each with its ``index``, ready for ``collate_qa``."""
    return [
        {**encode_qa(tokenizer, q, a, prompt_format, max_length), "index": i}
        for i, (q, a) in enumerate(zip(questions, answers, strict=True))
    ]


def batches(
    samples: Sequence[dict[str, Any]], tokenizer: PreTrainedTokenizerBase, batch_size: int, device: torch.device
) -> Iterator[dict[str, Any]]:
    """Collated batches of ``samples`` in order, tensors on ``device``."""
    for start in range(0, len(samples), batch_size):
        batch = collate_qa(samples[start : start + batch_size], tokenizer.pad_token_id)
        yield {k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in batch.items()}


def answer_token_nll(model: PreTrainedModel, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """Mean answer NLL [B] and each sample's per-token answer NLLs (|y_i| values), from one forward pass."""
    logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
    sum_logprob, num_tokens = sequence_logprobs_from_logits(logits, batch["labels"])
    per_token = token_nll(logits, batch["labels"])
    is_answer = batch["labels"][:, 1:] != IGNORE_INDEX
    return -sum_logprob / num_tokens, [row[mask].cpu() for row, mask in zip(per_token, is_answer, strict=True)]


def pairs_nll(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    questions: Sequence[str],
    answers: Sequence[str],
    prompt_format: str = "plain",
    max_length: int = 256,
    batch_size: int = 8,
) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """Mean answer NLL [N] and per-token answer NLLs of QA pairs, in eval mode on the model's device."""
    samples = encode_pairs(tokenizer, questions, answers, prompt_format, max_length)
    return samples_nll(model, tokenizer, samples, batch_size)


def samples_nll(
    model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, samples: Sequence[dict[str, Any]], batch_size: int
) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """:func:`pairs_nll` of samples already encoded by :func:`encode_pairs`."""
    means, per_token = [], []
    with evaluating(model):
        for batch in batches(samples, tokenizer, batch_size, model_device(model)):
            batch_means, batch_tokens = answer_token_nll(model, batch)
            means.append(batch_means.cpu())
            per_token.extend(batch_tokens)
    return torch.cat(means), per_token


def greedy_answers(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    samples: Sequence[dict[str, Any]],
    batch_size: int = 8,
    max_new_tokens: int = 32,
) -> list[str]:
    """Greedy answers to the prompts of samples encoded by :func:`encode_pairs` (generation sees the prompt only)."""
    generated: list[str] = []
    with evaluating(model):
        for batch in batches(samples, tokenizer, batch_size, model_device(model)):
            generated.extend(generate_greedy(model, tokenizer, batch, max_new_tokens))
    return generated
