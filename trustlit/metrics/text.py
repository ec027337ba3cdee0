"""Memorisation metrics of a QA model, as TOFU reports them.

- Answer probability: the length-normalised probability of the reference answer,
  P(y | x)^(1/|y|) = exp(sum_t log p(y_t | x, y_<t) / |y|).
- ROUGE-L of a generated answer g against a reference y, computed by Google's ``rouge-score``
  package (``RougeScorer(["rougeL"], use_stemmer=stem)``; ``rougeL``, not the sentence-split
  ``rougeLsum``): both texts are lower-cased, cut into alphanumeric words and, with ``stem``, words
  longer than 3 characters are Porter-stemmed; then recall R = LCS(g, y) / |y|, precision
  P = LCS / |g|, F1 = 2PR / (P + R) (all 0 when either text has no word).
  TOFU (``evaluate_util.py``, ``eval_rouge_recall``) and open-unlearning
  (``src/evals/metrics/utils.py``, ``eval_rouge_recall_batch``) report the stemmed rougeL *recall*:
  :func:`rouge_l_recall` with its default ``stem=True`` is that number. MUSE's released code
  (``metrics/logger.py``) scores VerbMem and KnowMem by rougeL *F1 without stemming*:
  ``rouge_l_f1(..., stem=False)``.
- Refusal detection: whether an answer declines to answer (TOFU's ``idontknow.jsonl`` phrasings), and
  non-answer detection: an answer that states nothing ("Nobody knows.", empty), the other
  hallucination-free outcome Attention-Shifting's paper counts.
- Degeneration: seq-rep-n of Welleck et al. (2020, "Neural Text Generation with Unlikelihood Training",
  arXiv 1908.04319), 1 - |distinct n-grams of g| / |n-grams of g| over g's words and punctuation marks;
  an answer whose 4-grams repeat at least half the time is degenerate text (loops such as "himself **
  himself ** ..."), not a stated fact.
"""

from __future__ import annotations

import functools
import re
from typing import Any

import torch


def answer_probability(sum_logprob: torch.Tensor, num_tokens: torch.Tensor) -> torch.Tensor:
    """exp(sum_logprob / num_tokens) per sample; a sample with no answer token is an error."""
    if bool((num_tokens <= 0).any()):
        raise ValueError("answer_probability: a sample has no answer token")
    return torch.exp(sum_logprob / num_tokens)


@functools.cache
def _rouge_l_scorer(stem: bool) -> Any:
    # imported here: rouge-score pulls in nltk, seconds that every `import trustlit` would pay
    from rouge_score.rouge_scorer import RougeScorer

    return RougeScorer(["rougeL"], use_stemmer=stem)


def _rouge_l(prediction: str, reference: str, stem: bool) -> Any:
    """rouge-score's rougeL Score(precision, recall, fmeasure); its argument order is (target, prediction)."""
    for name, text in (("prediction", prediction), ("reference", reference)):
        if not isinstance(text, str):
            raise ValueError(f"ROUGE-L {name} must be a string, got {type(text).__name__}: {text!r:.80}")
    return _rouge_l_scorer(bool(stem)).score(reference, prediction)["rougeL"]


def rouge_l_recall(prediction: str, reference: str, stem: bool = True) -> float:
    """ROUGE-L recall LCS / |reference| of ``prediction`` (TOFU's ``rougeL_recall``; 0 for an empty reference)."""
    return float(_rouge_l(prediction, reference, stem).recall)


def rouge_l_f1(prediction: str, reference: str, stem: bool = True) -> float:
    """ROUGE-L F1 of ``prediction`` against ``reference`` (0 when either is empty or they share no word)."""
    return float(_rouge_l(prediction, reference, stem).fmeasure)


# Every line of TOFU's idontknow.jsonl matches one of these; TOFU's true answers do not, except
# the few that themselves state "there is no information" (a hedge, counted as a refusal).
_REFUSAL_PATTERNS = (
    r"\bi (?:really )?(?:do not|don't|dont) know\b",
    r"\bnot (?:sure|certain)\b",
    r"\b(?:no|lack(?:ing)?(?: the)?|missing) (?:\w+ )?"
    r"(?:information|data|knowledge|idea|clue|insight|enlightenment|specifics|familiarity)\b",
    r"\b(?:i|my \w+) (?:do not|don't|does not|doesn't|did not|didn't) (?:seem to )?"
    r"(?:have|hold|possess|contain|cover|include|extend)\b",
    r"\b(?:beyond|outside(?: of)?|out of) my\b",
    r"\bi (?:can't|cannot|can not)\b",
    r"\bi(?:'m| am) (?:unable|not able) to\b",
    r"\bnot aware\b|\bunaware\b",
    r"\bi(?:'m| am) afraid\b",
    r"\bneed to look (?:\w+ )?up\b",
    r"\bat a (?:loss|disadvantage)\b",
    r"\bi (?:haven't|have not|have yet to)\b|\byet to learn\b",
    r"(?:not|n't) been (?:educated|trained|taught|included|informed|briefed)\b",
    r"\bnot (?:\w+ ){0,3}familiar\b",
    r"\bnot (?:well-versed|informed|knowledgeable|privy|acquainted|equipped|briefed|something i|information i|"
    r"the (?:best|right)|in my|within my)\b",
    r"\b(?:clueless|stumped|drawing a blank|blank on|in the dark about|blind spot|mystery to me|unknown to me|"
    r"uncharted territory|come up short|decline to answer|limited to what i)\b",
)
_REFUSAL = re.compile("|".join(_REFUSAL_PATTERNS))


def is_refusal(text: str) -> bool:
    """Whether ``text`` declines to answer ("I don't know", "I'm not sure", "that's beyond my knowledge", ...).

    Case-insensitive; typographic apostrophes count as ASCII ones.
    """
    return _REFUSAL.search(text.lower().replace("\u2019", "'")) is not None


# Answers that state no fact without declining in words: Attention-Shifting's typical outputs on forget questions
# ("Nobody knows.", "blank."), empty or punctuation-only generations. The whole answer must be such a phrase: a
# sentence that merely contains "nobody" or "unknown" states something and is judged on its content.
_NON_ANSWER = re.compile(
    r"(?:(?:nobody|no one|no-one|noone|none|nothing|unknown|blank|unclear|undisclosed|n/?a|no answer|no comment)"
    r"(?: (?:knows|is known|at all|whatsoever))?)?"
)


def is_non_answer(text: str) -> bool:
    """Whether ``text`` is a non-answer: empty, punctuation only, or wholly a contentless phrase ("Nobody knows.").

    Case-insensitive; surrounding punctuation and whitespace are ignored. Refusals in words ("I don't know") are
    :func:`is_refusal`'s.
    """
    core = re.sub(r"[^\w/' -]+", " ", text.lower().replace("\u2019", "'"))
    return _NON_ANSWER.fullmatch(" ".join(core.split())) is not None


DEGENERATE_NGRAM = 4  # Welleck et al.'s seq-rep-4
DEGENERATE_REPETITION = 0.5
_TOKENS = re.compile(r"[^\W_]+|[^\w\s]|_")  # words (letters, digits) and single marks, "_" a mark too


def repetition(text: str, n: int = DEGENERATE_NGRAM) -> float:
    """seq-rep-n of ``text``: the share of its n-grams (of lower-cased words and single punctuation marks) that
    repeat an earlier one, 1 - |distinct n-grams| / |n-grams|; 0 for a text of fewer than n tokens."""
    if n < 1:
        raise ValueError(f"repetition needs n >= 1, got {n}")
    tokens = _TOKENS.findall(text.lower())
    ngrams = [tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1)]
    return 1 - len(set(ngrams)) / len(ngrams) if ngrams else 0.0


def is_degenerate(text: str, threshold: float = DEGENERATE_REPETITION) -> bool:
    """Whether ``text`` is degenerate: its :func:`repetition` (seq-rep-4) is at least ``threshold``."""
    return repetition(text) >= threshold
