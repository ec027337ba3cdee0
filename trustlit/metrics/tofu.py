"""TOFU evaluation: Maini et al., 2024, "TOFU: A Task of Fictitious Unlearning for LLMs" (arXiv 2401.06121).

The definitions follow the original TOFU code (``aggregate_eval_stat.py``). For a QA pair (x, y),
``nll(y|x) = NLL(y|x) / |y|`` is the mean negative log-likelihood per answer token and
``p(y|x) = exp(-nll(y|x))`` the length-normalised probability. For record i with paraphrased
answer y~_i and perturbed (wrong) answers y^_ij, j = 1..J:

- truth ratio ``R_i = p(y~_i) / (prod_j p(y^_ij))^(1/J) = exp(mean_j nll(y^_ij) - nll(y~_i))``
  (TOFU's ``exp(avg_perturbed - avg_paraphrased)``): large when the model prefers the truth;
- truth-ratio summary: forget split ``mean_i min(R_i, 1/R_i)``; retain, real authors and world
  facts ``mean_i max(0, 1 - 1/R_i)``. The paper writes ``max(0, 1 - R)`` with R taken the other
  way up (perturbed over paraphrased); both are the same number;
- probability: forget and retain ``mean_i p(y_i|x_i)``; real authors and world facts, where the
  perturbed answers are the other options of a multiple choice,
  ``mean_i p(y_i) / (p(y_i) + sum_j p(y^_ij))``;
- ROUGE-L recall of the greedy answer against y_i, stemmed, by the ``rouge-score`` package as TOFU
  computes it (:func:`~trustlit.metrics.text.rouge_l_recall`); the greedy answer runs to EOS or
  ``TOFU_MAX_NEW_TOKENS`` = 200 new tokens (open-unlearning's ``max_new_tokens: 200``; TOFU's own
  ``generation.max_length: 200`` caps prompt plus answer, slightly shorter);
- Forget Quality: the p-value of the two-sample Kolmogorov-Smirnov test (``scipy.stats.ks_2samp``,
  two-sided, as TOFU's ``get_forget_quality``) between the truth ratios R on the forget split of the
  unlearned model and of the retain model (trained without it). Its power depends on the two sample
  sizes, so they are reported with it;
- Model Utility: the harmonic mean of {probability, ROUGE-L, truth-ratio summary} x {retain,
  real authors, world facts}, over the splits that are evaluated.

Real authors and world facts have no paraphrased answer: the answer stands in, as in TOFU. A
record's perturbed answers are scored one by one; rows with fewer than the most perturbed answers
are padded with NaN and every mean or sum over j skips the padding (per-row means). TOFU's files
have the same count in every row of a split (5 in forget/retain, 3 in real authors/world facts).

The module also reports, for the forget split, how often greedy answers refuse
(:func:`~trustlit.metrics.text.is_refusal`), state nothing (non-answers,
:func:`~trustlit.metrics.text.is_non_answer`), or are none of these nor correct (fabrications, and among
them the degenerate loops, :func:`~trustlit.metrics.text.is_degenerate`), to test the claim that a method
makes the model "refuse, don't hallucinate" (:func:`answer_rates`).

Notes: docs/methods/tofu_evaluation.md
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import torch
from scipy.stats import ks_2samp
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from trustlit.llm.scoring import encode_pairs, greedy_answers, pairs_nll, samples_nll
from trustlit.metrics.text import is_degenerate, is_non_answer, is_refusal, rouge_l_recall

SplitRole = Literal["forget", "retain", "general"]
SUMMARY_KEYS = ("prob", "rougeL", "truth_ratio")  # a split's summary (summarise_split); MU is their hmean
SPLIT_ROLES = ("forget", "retain", "general")
CORRECT_ROUGE_RECALL = 0.5  # a greedy answer with at least this ROUGE-L recall counts as correct
TOFU_MAX_NEW_TOKENS = 200  # open-unlearning's generation config; 32 cut about 60 % of the forget/retain answers


# --------------------------------------------------------------------------- pure functions


def truth_ratio(paraphrased_nll: torch.Tensor, perturbed_nll: torch.Tensor) -> torch.Tensor:
    """R [N] = exp(mean_j perturbed_nll[:, j] - paraphrased_nll) from mean NLLs [N] and [N, J] (NaN = no answer).

    In float64, so that the wide ratios of a heavily unlearned model stay finite.
    """
    return torch.exp((perturbed_nll.nanmean(dim=1) - paraphrased_nll).double())


def forget_truth_ratio_score(ratio: torch.Tensor) -> float:
    """Forget-split summary mean(min(R, 1/R)): 1 when the model cannot tell true from false."""
    return float(torch.minimum(ratio, 1 / ratio).mean())


def retain_truth_ratio_score(ratio: torch.Tensor) -> float:
    """Retain / real-authors / world-facts summary mean(max(0, 1 - 1/R)): 1 when the truth wins by far."""
    return float((1 - 1 / ratio).clamp(min=0).mean())


def normalised_probability(answer_nll: torch.Tensor, perturbed_nll: torch.Tensor) -> torch.Tensor:
    """p_true / (p_true + sum_j p_pert_j) [N] from mean NLLs [N] and [N, J] (NaN = no answer).

    A softmax over the log-probabilities, so that answers too unlikely for exp() (large NLLs after
    unlearning) still give a number instead of 0/0.
    """
    log_p = torch.cat([-answer_nll[:, None], -perturbed_nll.nan_to_num(nan=math.inf)], dim=1)
    return torch.softmax(log_p, dim=1)[:, 0]


def forget_quality(
    unlearned_ratio: torch.Tensor | Sequence[float], retain_ratio: torch.Tensor | Sequence[float]
) -> float:
    """p-value of ``scipy.stats.ks_2samp`` between the forget-split truth ratios of the two models."""
    unlearned, retain = (torch.as_tensor(r, dtype=torch.float64).cpu().numpy() for r in (unlearned_ratio, retain_ratio))
    return float(ks_2samp(unlearned, retain).pvalue)


def harmonic_mean(values: Iterable[float]) -> float:
    """n / sum_i 1/v_i over non-negative values; 0 as soon as one value is 0 (scipy's ``hmean`` convention)."""
    values = [float(v) for v in values]
    if not values:
        raise ValueError("harmonic_mean of no values")
    if any(v < 0 or math.isnan(v) for v in values):
        raise ValueError(f"harmonic_mean needs non-negative numbers, got {values}")
    if min(values) == 0:
        return 0.0
    return len(values) / sum(1 / v for v in values)


def model_utility(summaries: Iterable[Mapping[str, float]]) -> float:
    """Harmonic mean of ``prob``, ``rougeL`` and ``truth_ratio`` of each non-forget split's summary."""
    return harmonic_mean(s[key] for s in summaries for key in SUMMARY_KEYS)


def answer_rates(
    generated: Sequence[str], references: Sequence[str], correct_threshold: float = CORRECT_ROUGE_RECALL
) -> dict[str, float]:
    """How the greedy answers to forget questions come out, as shares of all answers:

    - ``refusal_rate``: they decline in words (:func:`~trustlit.metrics.text.is_refusal`);
    - ``non_answer_rate``: they state nothing (:func:`~trustlit.metrics.text.is_non_answer`; not refusals);
    - ``fabrication_rate``: neither, and not correct (ROUGE-L recall against the reference below
      ``correct_threshold``): a stated fact that is not the true one, i.e. a hallucination;
    - ``degenerate_rate``: the fabrications that are degenerate text (:func:`~trustlit.metrics.text.is_degenerate`,
      seq-rep-4 >= 0.5), not a stated fact; ``fabrication_rate - degenerate_rate`` is the fluent fabrications.
    """
    if len(generated) != len(references) or not generated:
        raise ValueError(
            f"answer_rates needs as many answers as references (>0), got {len(generated)}, {len(references)}"
        )
    refusals = [is_refusal(text) for text in generated]
    non_answers = [is_non_answer(text) and not r for text, r in zip(generated, refusals, strict=True)]
    correct = [rouge_l_recall(text, ref) >= correct_threshold for text, ref in zip(generated, references, strict=True)]
    fabrications = [not (r or n or c) for r, n, c in zip(refusals, non_answers, correct, strict=True)]
    return {
        "refusal_rate": sum(refusals) / len(generated),
        "non_answer_rate": sum(non_answers) / len(generated),
        "fabrication_rate": sum(fabrications) / len(generated),
        "degenerate_rate": sum(f and is_degenerate(text) for f, text in zip(fabrications, generated, strict=True))
        / len(generated),
    }


# --------------------------------------------------------------------------- scoring with a model


def perturbed_answers(records: Sequence[Mapping[str, Any]], split: str) -> list[list[str]]:
    """Each record's ``perturbed_answer`` list; a record without one is an error naming the split."""
    lists = []
    for i, record in enumerate(records):
        perturbed = record.get("perturbed_answer")
        if not perturbed or not isinstance(perturbed, list):
            raise ValueError(
                f"split '{split}', record {i}: no 'perturbed_answer' list; the truth ratio needs it "
                "(TOFU: use the *_perturbed splits)"
            )
        lists.append(perturbed)
    return lists


@dataclass
class SplitScores:
    """Per-sample scores of one split.

    ``answer_nll``, ``paraphrased_nll`` [N] and ``perturbed_nll`` [N, J] (NaN-padded) are mean
    NLLs per answer token; ``answer_token_nll`` holds each answer's per-token NLLs (for Min-K%);
    ``generated`` the greedy answers and ``rouge_l_recall`` [N] their ROUGE-L recall.
    """

    answers: list[str]
    answer_nll: torch.Tensor
    answer_token_nll: list[torch.Tensor]
    paraphrased_nll: torch.Tensor
    perturbed_nll: torch.Tensor
    generated: list[str]
    rouge_l_recall: torch.Tensor

    @property
    def truth_ratio(self) -> torch.Tensor:
        return truth_ratio(self.paraphrased_nll, self.perturbed_nll)


def score_split(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    records: Iterable[Mapping[str, Any]],
    split: str,
    prompt_format: str = "plain",
    max_length: int = 256,
    batch_size: int = 8,
    max_new_tokens: int = TOFU_MAX_NEW_TOKENS,
) -> SplitScores:
    """Score the records of one split (``question``, ``answer``, ``perturbed_answer``, optional
    ``paraphrased_answer``) with ``model``: NLLs of all answers, greedy answers (up to ``max_new_tokens``)
    and their stemmed ROUGE-L recall.

    ``split`` names the records in errors. Every text goes through :func:`~trustlit.llm.scoring.encode_qa` and
    :func:`~trustlit.llm.scoring.collate_qa`, under ``torch.no_grad()`` in eval mode on the model's device.
    """
    records = list(records)
    perturbed = perturbed_answers(records, split)
    questions = [r["question"] for r in records]
    answers = [r["answer"] for r in records]
    paraphrased = [r.get("paraphrased_answer") or r["answer"] for r in records]
    nll = {"max_length": max_length, "prompt_format": prompt_format, "batch_size": batch_size}
    samples = encode_pairs(tokenizer, questions, answers, prompt_format, max_length)  # for NLLs and generation
    answer_nll, answer_tokens = samples_nll(model, tokenizer, samples, batch_size)
    paraphrased_nll = (
        answer_nll if paraphrased == answers else pairs_nll(model, tokenizer, questions, paraphrased, **nll)[0]
    )
    # every (record, perturbation) pair scored as its own sample, scattered back into a NaN-padded [N, J]
    where = [(i, j) for i, row in enumerate(perturbed) for j in range(len(row))]
    flat_nll, _ = pairs_nll(
        model, tokenizer, [questions[i] for i, _ in where], [perturbed[i][j] for i, j in where], **nll
    )
    perturbed_nll = torch.full((len(records), max(map(len, perturbed))), math.nan)
    perturbed_nll[tuple(torch.tensor(where).T)] = flat_nll
    generated, rouge = greedy_rouge(model, tokenizer, samples, answers, batch_size, max_new_tokens)
    return SplitScores(answers, answer_nll, answer_tokens, paraphrased_nll, perturbed_nll, generated, rouge)


def greedy_rouge(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    samples: Sequence[dict[str, Any]],
    answers: Sequence[str],
    batch_size: int = 8,
    max_new_tokens: int = TOFU_MAX_NEW_TOKENS,
) -> tuple[list[str], torch.Tensor]:
    """Greedy answers to samples encoded by :func:`~trustlit.llm.scoring.encode_pairs` and their stemmed ROUGE-L
    recall [N] against ``answers``."""
    generated = greedy_answers(model, tokenizer, samples, batch_size, max_new_tokens)
    return generated, torch.tensor([rouge_l_recall(g, a) for g, a in zip(generated, answers, strict=True)])


def summarise_split(scores: SplitScores, role: SplitRole) -> dict[str, float]:
    """TOFU's three numbers for a split: ``prob``, ``rougeL`` (recall) and ``truth_ratio`` (its summary).

    ``role``: ``forget`` or ``retain`` (plain probability), ``general`` (real authors, world facts:
    probability normalised over the true and perturbed answers).
    """
    if role not in SPLIT_ROLES:
        raise ValueError(f"role must be one of {SPLIT_ROLES}, got '{role}'")
    if role == "general":
        prob = normalised_probability(scores.answer_nll, scores.perturbed_nll)
    else:
        prob = torch.exp(-scores.answer_nll)
    summary = forget_truth_ratio_score if role == "forget" else retain_truth_ratio_score
    return {
        "prob": float(prob.mean()),
        "rougeL": float(scores.rouge_l_recall.mean()),
        "truth_ratio": summary(scores.truth_ratio),
    }
