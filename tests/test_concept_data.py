"""Concept-annotated author descriptions (trustlit/data/concepts.py): the annotations are exact (checked by an
independent sentence parser), rare values are dropped before any text states them, and bad input is refused."""

from __future__ import annotations

import re

import numpy as np
import pytest

from trustlit.data.concepts import (
    Author,
    ConceptItems,
    concept_items,
    drop_rare_values,
    fictitious_authors,
    items_from_authors,
)

# cue words of each sentence kind, tried in this order (a birth-decade sentence also says "born in")
CUES = (
    ("father", ("father",)),
    ("mother", ("mother",)),
    ("birth decade", ("born in the", "born during the", "birth year")),
    ("award", (" won ", "received", "honoured", "earned")),
    ("born in", ("born in", "comes from", "birthplace", "native of")),
    ("genre", ("writes", "known for", "genre", "works mainly")),
    ("gender", (" a man", " a woman", " male ", " female ")),
)


def parse_concepts(text: str, items: ConceptItems) -> set[str]:
    """The concepts a text states, read back from its sentences (the opening sentence states none)."""
    stated = set()
    for sentence in re.split(r"(?<=\.) ", text)[1:]:
        group = next(group for group, cues in CUES if any(cue in sentence for cue in cues))
        values = [name for name, g in zip(items.concept_names, items.groups, strict=True) if g == group]
        matches = [name for name in values if re.search(rf"\b{re.escape(name.split(': ', 1)[1])}\b", sentence)]
        longest = max(matches, key=len)  # "nurse" inside "a registered nurse" is not a second value
        stated.add(longest)
    return stated


@pytest.fixture(scope="module")
def fictitious():
    return concept_items("fictitious", num_authors=60, variants_per_author=4, seed=3)


def test_fictitious_annotations_are_exact(fictitious):
    items = fictitious
    assert items.concepts.dtype == np.bool_ and items.concepts.shape == (240, len(items.concept_names))
    for text, row in zip(items.texts, items.concepts, strict=True):
        marked = {name for name, on in zip(items.concept_names, row, strict=True) if on}
        assert parse_concepts(text, items) == marked, text
    assert set(items.groups) == {"genre", "born in", "award", "father", "mother", "birth decade"}
    assert items.concepts.any(axis=0).all()  # no concept column is empty
    assert items.concepts.any(axis=1).all()  # every text states at least one attribute


def test_ids_and_determinism(fictitious):
    assert fictitious.ids[:5] == [f"fictitious-0-{v}" for v in range(4)] + ["fictitious-1-0"]
    again = concept_items("fictitious", num_authors=60, variants_per_author=4, seed=3)
    assert again.texts == fictitious.texts and np.array_equal(again.concepts, fictitious.concepts)
    other = concept_items("fictitious", num_authors=60, variants_per_author=4, seed=4)
    assert other.texts != fictitious.texts


def test_phrasing_varies(fictitious):
    """Texts do not share one surface form: several openings and several sentence forms per attribute."""
    names = [author.name for author in fictitious_authors(60, seed=3)]
    openings = {text.split(".")[0].replace(names[i // 4], "NAME") for i, text in enumerate(fictitious.texts)}
    assert len(openings) == 5
    father = {re.sub(r"(was|as) an? .*", "", s) for t in fictitious.texts for s in t.split(". ") if "father" in s}
    assert len(father) >= 5  # 3 templates x 3 subjects


def test_rare_values_are_dropped_before_texts():
    authors = [
        Author("a", "Ann Lee", {"genre": "poetry", "father": "chef"}),
        Author("b", "Bo Kim", {"genre": "poetry", "father": "baker"}),
        Author("c", "Cy Ito", {"genre": "poetry", "father": "chef"}),
    ]
    kept = drop_rare_values(authors, min_count=2)
    chef = {"genre": "poetry", "father": "chef"}
    assert [a.values for a in kept] == [chef, {"genre": "poetry"}, chef]
    items = items_from_authors(kept, variants_per_author=20, seed=0)
    assert items.concept_names == ["genre: poetry", "father: chef"]
    assert not any("baker" in text for text in items.texts)
    assert items.concepts[20:40, 1].sum() == 0  # Bo Kim's father is never stated


def test_large_min_count_leaves_no_concepts():
    items = concept_items("fictitious", num_authors=10, variants_per_author=2, min_count=11)
    assert items.concepts.shape == (20, 0) and items.concept_names == []


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"source": "imagenet"}, "source='imagenet' is invalid"),
        ({"variants_per_author": 0}, "variants_per_author=0 is invalid"),
        ({"num_authors": -2}, "num_authors=-2 is invalid"),
        ({"min_count": 0}, "min_count=0 is invalid"),
    ],
)
def test_bad_input(kwargs, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        concept_items(**kwargs)


def test_items_validate_shapes():
    with pytest.raises(ValueError, match="bool"):
        ConceptItems(["x"], np.ones((1, 1)), ["a: b"], ["a"], ["0"])
    with pytest.raises(ValueError, match="2 texts"):
        ConceptItems(["x", "y"], np.ones((1, 1), dtype=bool), ["a: b"], ["a"], ["0", "1"])
