"""Memorisation metrics of a QA model, as TOFU reports them.

- Answer probability: the length-normalised probability of the reference answer,
  P(y | x)^(1/|y|) = exp(sum_t log p(y_t | x, y_<t) / |y|).
- ROUGE-L recall of a generated answer: LCS(generated, reference) / |reference| over
  lower-cased alphanumeric words (the tokenisation of Google's ``rouge_score`` without stemming).
"""

from __future__ import annotations

import re

import torch

_WORD = re.compile(r"[a-z0-9]+")


def answer_probability(sum_logprob: torch.Tensor, num_tokens: torch.Tensor) -> torch.Tensor:
    """exp(sum_logprob / num_tokens) per sample; a sample with no answer token is an error."""
    if bool((num_tokens <= 0).any()):
        raise ValueError("answer_probability: a sample has no answer token")
    return torch.exp(sum_logprob / num_tokens)


def _words(text: str) -> list[str]:
    return _WORD.findall(text.lower())


def _lcs_length(a: list[str], b: list[str]) -> int:
    previous = [0] * (len(b) + 1)
    for token in a:
        current = [0]
        for j, other in enumerate(b):
            current.append(previous[j] + 1 if token == other else max(previous[j + 1], current[j]))
        previous = current
    return previous[-1]


def rouge_l_recall(prediction: str, reference: str) -> float:
    """ROUGE-L recall of ``prediction`` against ``reference`` (0 for an empty reference)."""
    reference_words = _words(reference)
    if not reference_words:
        return 0.0
    return _lcs_length(_words(prediction), reference_words) / len(reference_words)
