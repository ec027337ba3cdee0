"""Texts with exact binary concept annotations, and their embeddings served as a DataModule.

EXPLAIN-R ("Advancing Interpretability of CLIP Representations with Concept Surrogate Model", NeurIPS 2025; code
nhatkhtn/explain-r) explains an embedding model with a surrogate over binary concept annotations
``c in {0, 1}^K`` of each instance, with a vocabulary of concept names; the released code keeps a concept only
if it occurs at least ``min_threshold = 3`` times. Its annotations come from captions; here the texts are
generated from known facts so the annotations are exact: each item is a short description of one author that
states a random non-empty subset of the author's attributes (genre, birthplace country, gender, award, father's
and mother's professions, birth decade), and the item's concept row marks exactly the values its text states.

Sources:
- ``fictitious``: the invented authors of :mod:`trustlit.fictitious` (every attribute known; no gender).
- ``tofu``: the 200 TOFU authors (``full.json``: 20 QA records each), whose attributes are read from their
  records with explicit vocabularies (:func:`tofu_authors`); an attribute that is not found,
  or found with two values, is left unknown and never stated.

A value shared by fewer than ``min_count`` authors is dropped before any text is written (so no text states
a value the vocabulary lacks), and a concept no item happens to state is dropped after. Sentences name the
author or say "the author", never a pronoun, so no text implies a gender it does not annotate.
"""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from trustlit.fictitious import generate_authors

SOURCES = ("fictitious",)  # "tofu" follows
# concept groups, in column order; a concept is named "<group>: <value>"
GROUPS = ("genre", "born in", "gender", "award", "father", "mother", "birth decade")
GENDER_WORDS = {"male": ("man", "male"), "female": ("woman", "female")}
OPENINGS = (
    "{name} is an author.",
    "A short profile of the writer {name}.",
    "Meet {name}, a novelist.",
    "{name} has published several books.",
    "Here is what is known about {name}.",
)
SUBJECTS = ("{name}", "The author", "This writer")
# templates per group: {s} subject, {p} possessive, {v} value, {a} value with its article
TEMPLATES = {
    "genre": (
        "{s} writes {v}.",
        "{s} is best known for {v}.",
        "{p} books belong to the {v} genre.",
        "{s} works mainly in {v}.",
    ),
    "born in": (
        "{s} was born in {place}.",
        "{s} comes from {place}.",
        "{p} birthplace is {place}.",
        "{s} is a native of {place}.",
    ),
    "gender": ("{s} is a {noun}.", "{s} is a {adjective} writer.", "{s} identifies as a {noun}."),
    "award": ("{s} won {v}.", "{s} received {v}.", "{s} was honoured with {v}.", "{p} work earned {v}."),
    "father": ("{p} father was {a}.", "{p} father worked as {a}.", "{s} was raised by a father who was {a}."),
    "mother": ("{p} mother was {a}.", "{p} mother worked as {a}.", "{s} was raised by a mother who was {a}."),
    "birth decade": ("{s} was born in the {v}.", "{s} was born during the {v}.", "{p} birth year falls in the {v}."),
}


@dataclass(frozen=True)
class Author:
    """One author's known attributes: ``values[group]`` is a value or absent; ``city`` only decorates the place."""

    key: str
    name: str
    values: dict[str, str]
    city: str | None = None


@dataclass(frozen=True)
class ConceptItems:
    """Texts with binary concept annotations: ``concepts[i, k]`` says whether text ``i`` states concept ``k``."""

    texts: list[str]
    concepts: np.ndarray
    concept_names: list[str]
    groups: list[str]
    ids: list[str]

    def __post_init__(self) -> None:
        if self.concepts.dtype != np.bool_ or self.concepts.ndim != 2:
            raise ValueError(f"concepts must be a bool [N, K] array, got {self.concepts.dtype} {self.concepts.shape}")
        rows, columns = self.concepts.shape
        if not len(self.texts) == len(self.ids) == rows:
            raise ValueError(f"{len(self.texts)} texts and {len(self.ids)} ids for {rows} concept rows")
        if not len(self.concept_names) == len(self.groups) == columns:
            raise ValueError(f"{len(self.concept_names)} names and {len(self.groups)} groups for {columns} concepts")


def _article(value: str) -> str:
    return f"{'an' if value[0].lower() in 'aeiou' else 'a'} {value}"


def _strip_article(value: str) -> str:
    for article in ("a ", "an ", "the "):
        if value.startswith(article):
            return value[len(article) :]
    return value


def fictitious_authors(num_authors: int, seed: int) -> list[Author]:
    """The invented authors of :mod:`trustlit.fictitious` as attribute records (no gender: it has none)."""
    authors = []
    for author in generate_authors(num_authors, seed):
        city, country = author.birthplace.rsplit(", ", 1)
        values = {
            "genre": author.genre,
            "born in": country,
            "award": _strip_article(author.award),
            "father": _strip_article(author.father_job),
            "mother": _strip_article(author.mother_job),
            "birth decade": f"{author.birth_year // 10 * 10}s",
        }
        authors.append(Author(f"fictitious-{author.author_id}", author.name, values, city))
    return authors


def drop_rare_values(authors: list[Author], min_count: int) -> list[Author]:
    """Forget every value that fewer than ``min_count`` authors share, so no text states it."""
    counts = Counter((group, value) for author in authors for group, value in author.values.items())
    return [
        Author(
            author.key,
            author.name,
            {g: v for g, v in author.values.items() if counts[g, v] >= min_count},
            author.city,
        )
        for author in authors
    ]


def _sentence(group: str, value: str, author: Author, rng: random.Random) -> str:
    subject = rng.choice(SUBJECTS).format(name=author.name)
    fields = {"s": subject, "p": f"{subject}'s", "v": value, "a": _article(value)}
    if group == "born in":
        fields["place"] = f"{author.city}, {value}" if author.city and rng.random() < 0.5 else value
    if group == "gender":
        fields["noun"], fields["adjective"] = GENDER_WORDS[value]
    if group == "award":
        fields["v"] = f"the {value}"
    return rng.choice(TEMPLATES[group]).format(**fields)


def describe(author: Author, rng: random.Random) -> tuple[str, list[str]]:
    """One description of ``author`` stating a random non-empty subset of its attributes; the stated groups."""
    known = [group for group in GROUPS if group in author.values]
    stated = [group for group in known if rng.random() < 0.5] or ([rng.choice(known)] if known else [])
    rng.shuffle(stated)
    sentences = [rng.choice(OPENINGS).format(name=author.name)]
    sentences += [_sentence(group, author.values[group], author, rng) for group in stated]
    return " ".join(sentences), stated


def items_from_authors(authors: list[Author], variants_per_author: int, seed: int) -> ConceptItems:
    """``variants_per_author`` descriptions of every author, annotated with the concepts each states."""
    rng = random.Random(seed)
    texts, ids, stated_concepts = [], [], []
    for author in authors:
        for variant in range(variants_per_author):
            text, stated = describe(author, rng)
            texts.append(text)
            ids.append(f"{author.key}-{variant}")
            stated_concepts.append([(group, author.values[group]) for group in stated])
    # columns in group order, then by value; concepts no item states are absent
    vocabulary = sorted({c for row in stated_concepts for c in row}, key=lambda c: (GROUPS.index(c[0]), c[1]))
    column = {concept: k for k, concept in enumerate(vocabulary)}
    concepts = np.zeros((len(texts), len(vocabulary)), dtype=bool)
    for i, row in enumerate(stated_concepts):
        concepts[i, [column[c] for c in row]] = True
    return ConceptItems(
        texts=texts,
        concepts=concepts,
        concept_names=[f"{group}: {value}" for group, value in vocabulary],
        groups=[group for group, _ in vocabulary],
        ids=ids,
    )


def concept_items(
    source: str = "fictitious",
    *,
    num_authors: int | None = None,
    variants_per_author: int = 5,
    seed: int = 0,
    tofu_dir: str | Path | None = None,
    min_count: int = 3,
) -> ConceptItems:
    """Concept-annotated author descriptions (module docstring). ``num_authors=None``: 100 fictitious authors,
    or all 200 of TOFU; ``min_count`` (EXPLAIN-R's vocabulary threshold, 3) is the fewest authors a kept value
    needs; ``tofu_dir`` (needed by ``source="tofu"``) holds TOFU's ``full.json``."""
    if source not in SOURCES:
        raise ValueError(f"source={source!r} is invalid, expected one of {SOURCES}")
    for name, value in (("variants_per_author", variants_per_author), ("min_count", min_count)):
        if not isinstance(value, int) or value < 1:
            raise ValueError(f"{name}={value!r} is invalid, expected an integer >= 1")
    if num_authors is not None and (not isinstance(num_authors, int) or num_authors < 1):
        raise ValueError(f"num_authors={num_authors!r} is invalid, expected an integer >= 1 or None")
    authors = fictitious_authors(num_authors or 100, seed)
    return items_from_authors(drop_rare_values(authors, min_count), variants_per_author, seed)
