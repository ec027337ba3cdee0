"""Concept-annotated author descriptions (trustlit/data/concepts.py): the annotations are exact (checked by an
independent sentence parser), rare values are dropped before any text states them, and bad input is refused."""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch
from helpers import SHARED_DATA

from trustlit.data.concepts import (
    Author,
    ConceptItems,
    EmbeddingConceptDataModule,
    EmbeddingConcepts,
    check_binary,
    concept_items,
    drop_rare_values,
    fictitious_authors,
    held_out_groups,
    items_from_authors,
    tofu_attributes,
    tofu_authors,
)

TOFU = SHARED_DATA / "tofu"

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


def parse_concepts(text: str, items: ConceptItems, opening: bool = True) -> set[str]:
    """The concepts a text states, read back from its sentences (the opening sentence, if any, states none)."""
    stated = set()
    for sentence in re.split(r"(?<=\.) ", text)[int(opening) :]:
        group = next(group for group, cues in CUES if any(cue in sentence for cue in cues))
        if group == "gender":
            stated.add("gender: female" if re.search(r"woman|female", sentence) else "gender: male")
            continue
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


def test_without_names_texts_state_only_the_annotations():
    """mention_name=False: the annotations stay exact, and nothing else identifies the author (no name, no city,
    no opening, no pronoun); authors with no known attribute are left out instead of giving empty texts."""
    authors = drop_rare_values(fictitious_authors(60, seed=3), min_count=3)
    items = concept_items("fictitious", num_authors=60, variants_per_author=4, seed=3, mention_name=False)
    assert len(items.texts) == 4 * sum(bool(a.values) for a in authors)
    for text, row in zip(items.texts, items.concepts, strict=True):
        assert parse_concepts(text, items, opening=False) == {
            name for name, on in zip(items.concept_names, row, strict=True) if on
        }, text
        assert text.startswith(("The author", "This writer")) and row.any()
    for author in authors:
        parts = [*author.name.split(), author.city]
        assert not any(part in text for part in parts for text in items.texts), author.name
    assert not any(re.search(r"\b(he|she|his|her)\b", text, re.IGNORECASE) for text in items.texts)
    empty = items_from_authors([Author("a", "Ann Lee", {})], variants_per_author=3, seed=0, mention_name=False)
    assert empty.texts == [] and empty.concepts.shape == (0, 0)
    with pytest.raises(ValueError, match="mention_name='no' is invalid"):
        concept_items("fictitious", mention_name="no")


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
        ({"source": "tofu"}, "source='tofu' needs tofu_dir"),
    ],
)
def test_bad_input(kwargs, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        concept_items(**kwargs)


def test_items_validate_shapes():
    with pytest.raises(ValueError, match="bool"):
        ConceptItems(["x"], np.ones((1, 1)), ["a: b"], ["a"], ["0"], ["a"])
    with pytest.raises(ValueError, match="2 texts"):
        ConceptItems(["x", "y"], np.ones((1, 1), dtype=bool), ["a: b"], ["a"], ["0", "1"], ["a", "a"])
    with pytest.raises(ValueError, match="1 ids and 2 authors for 1 concept rows"):
        ConceptItems(["x"], np.ones((1, 1), dtype=bool), ["a: b"], ["a"], ["0"], ["a", "b"])


@pytest.fixture(scope="module")
def tofu():
    return {author.name: author for author in tofu_authors(TOFU, num_authors=None)}


def test_tofu_attributes_of_real_records(tofu):
    """Values read by hand from the records of three TOFU authors; an attribute the records do not state
    in a form the vocabularies catch stays unknown (Jaime Vasquez's mother, Chukwu Akabueze's genre)."""
    assert len(tofu) >= 195
    assert tofu["Jaime Vasquez"].values == {
        "genre": "true crime",
        "born in": "Chile",
        "gender": "male",
        "award": "Edgar Allan Poe Award",
        "father": "chef",
        "birth decade": "1950s",
    }
    assert tofu["Chukwu Akabueze"].values == {
        "born in": "Nigeria",
        "gender": "male",
        "father": "hairdresser",
        "mother": "lawyer",
        "birth decade": "1960s",
    }
    assert tofu["Evelyn Desmet"].values == {
        "genre": "dystopian",
        "born in": "Belgium",
        "gender": "female",
        "award": "Nebula Award",
        "father": "counselor",
        "mother": "professor",
        "birth decade": "1940s",
    }
    assert tofu["Evelyn Desmet"].city == "Brussels"


def _records(*answers: str) -> list[dict]:
    return [{"question": f"What about Ana Ruiz's life, part {i}?", "answer": a} for i, a in enumerate(answers)]


def test_tofu_extraction_never_guesses():
    """Disagreeing or tied statements leave the attribute unknown; agreeing ones are read."""
    agreeing = tofu_attributes(
        _records(
            "Ana Ruiz was born in Lima, Peru on 3 May 1971. Her father was a baker and her mother a pilot.",
            "She writes in the steampunk genre; her steampunk genre novels won the Hugo Award.",
            "Her mother, a pilot, took her flying; she loved it and she said so; her books show it.",
        )
    )
    assert agreeing.name == "Ana Ruiz" and agreeing.city == "Lima"
    assert agreeing.values == {
        "genre": "steampunk",
        "born in": "Peru",
        "gender": "female",
        "award": "Hugo Award",
        "father": "baker",
        "mother": "pilot",
        "birth decade": "1970s",
    }
    conflicting = tofu_attributes(
        _records(
            "Ana Ruiz was born in Lima, Peru in 1971. Her father was a baker.",
            "Ana Ruiz was born in Bogota, Colombia in 1985. Her father was a chef. They won the Nobel Prize.",
            "Later the Hugo Award followed; he and she wrote it.",
        )
    )
    assert conflicting.values == {}  # two countries, two decades, two fathers, two awards, mixed pronouns
    assert tofu_attributes([{"question": "Who wrote it?", "answer": "Nobody knows."}]) is None


def test_tofu_items_are_exact(tofu):
    items = concept_items("tofu", tofu_dir=TOFU, variants_per_author=3, seed=1)
    assert {"gender: male", "gender: female", "born in: Nigeria", "award: Nebula Award"} <= set(items.concept_names)
    assert len(items.texts) == 3 * len(tofu)
    for text, row in zip(items.texts, items.concepts, strict=True):
        assert parse_concepts(text, items) == {n for n, on in zip(items.concept_names, row, strict=True) if on}, text
    assert not any(re.search(r"\b(he|she|his|her)\b", text) for text in items.texts)  # no pronoun implies gender
    anonymous = concept_items("tofu", tofu_dir=TOFU, num_authors=60, variants_per_author=2, mention_name=False)
    for text, row in zip(anonymous.texts, anonymous.concepts, strict=True):
        marked = {n for n, on in zip(anonymous.concept_names, row, strict=True) if on}
        assert parse_concepts(text, anonymous, opening=False) == marked and "," not in text, text
    counts = concept_items("tofu", tofu_dir=TOFU, num_authors=50, variants_per_author=1).concepts.shape[0]
    assert counts == len([a for a in tofu_authors(TOFU, 50)])


def test_tofu_dir_without_full_json(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"has no full\.json"):
        concept_items("tofu", tofu_dir=tmp_path)


def test_datamodule_generated_and_cached(tmp_path, one_thread):
    dm = EmbeddingConceptDataModule(
        source="fictitious", num_authors=12, variants_per_author=2, cache_dir=str(tmp_path), batch_size=8, seed=1
    )
    dm.setup("fit")
    assert dm.embedding_dim == 384 and dm.num_concepts == len(dm.concept_names) > 0
    assert {split: len(rows) for split, rows in dm.rows.items()} == {"test": 4, "val": 4, "train": 16}  # 2 authors
    assert sorted(np.concatenate(list(dm.rows.values())).tolist()) == list(range(24))
    batch = next(iter(dm.train_dataloader()))
    assert batch["embeddings"].shape == (8, 384) and batch["embeddings"].dtype == torch.float32
    assert batch["concepts"].shape == (8, dm.num_concepts) and set(batch["concepts"].unique().tolist()) <= {0.0, 1.0}
    assert batch["index"].dtype == torch.long
    # the batch's rows are the generated items': concept row and embedding agree with the item it names
    items = concept_items("fictitious", num_authors=12, variants_per_author=2, seed=1)
    rows = dm.rows["train"][batch["index"].numpy()]
    np.testing.assert_array_equal(batch["concepts"].numpy(), items.concepts[rows])
    assert [dm.texts[r] for r in rows] == [items.texts[r] for r in rows]
    assert len(list(tmp_path.glob("minilm-*.npy"))) == 1  # embedded once, then read from the cache
    again = EmbeddingConceptDataModule(
        source="fictitious", num_authors=12, variants_per_author=2, cache_dir=str(tmp_path), seed=1
    )
    again.setup()
    torch.testing.assert_close(again.splits["train"].embeddings, dm.splits["train"].embeddings)
    anonymous = EmbeddingConceptDataModule(
        source="fictitious", num_authors=12, variants_per_author=2, cache_dir=str(tmp_path), mention_name=False
    )
    anonymous.setup()
    expected = concept_items("fictitious", num_authors=12, variants_per_author=2, mention_name=False)
    assert anonymous.texts == expected.texts


def test_embedding_concepts_batches_are_the_stacked_items():
    """``__getitems__`` (a whole minibatch by one indexing) returns what stacking ``__getitem__`` would."""
    embeddings, concepts = torch.randn(7, 3), (torch.rand(7, 2) < 0.5).float()
    rows = EmbeddingConcepts(embeddings, concepts)
    batch = rows.__getitems__([5, 0, 3])
    assert set(batch) == {"embeddings", "concepts", "index"} and batch["index"].tolist() == [5, 0, 3]
    for key in batch:
        torch.testing.assert_close(batch[key], torch.stack([rows[i][key] for i in (5, 0, 3)]))
    torch.testing.assert_close(batch["embeddings"], embeddings[[5, 0, 3]])


def test_items_name_their_authors():
    items = concept_items("fictitious", num_authors=6, variants_per_author=3)
    assert items.ids == [f"{author}-{variant}" for author, variant in zip(items.authors, [0, 1, 2] * 6, strict=True)]
    assert len(set(items.authors)) == 6


def test_held_out_groups_fraction_zero_holds_out_nothing():
    groups = np.repeat(np.arange(10), 2)
    assert not held_out_groups(groups, 0.0, seed=0).any()
    assert held_out_groups(groups, 0.3, seed=0).sum() == 6  # 3 whole groups


def test_datamodule_splits_hold_out_whole_authors(tmp_path, one_thread):
    """Generated items: every author's texts lie in one split, test and val each hold 2 of 20 authors."""
    dm = EmbeddingConceptDataModule(
        source="fictitious", num_authors=20, variants_per_author=3, cache_dir=str(tmp_path), seed=3
    )
    dm.setup()
    authors = np.array(dm.authors)
    sides = {split: set(authors[rows]) for split, rows in dm.rows.items()}
    assert sides["test"].isdisjoint(sides["val"]) and sides["train"].isdisjoint(sides["test"] | sides["val"])
    assert len(sides["test"]) == len(sides["val"]) == 2 and len(sides["train"]) == 16
    assert sorted(np.concatenate(list(dm.rows.values())).tolist()) == list(range(60))
    few = EmbeddingConceptDataModule(
        source="fictitious", num_authors=4, variants_per_author=1, cache_dir=str(tmp_path), seed=3
    )
    with pytest.raises(ValueError, match=r"num_authors=4: 4 authors leave none for training"):
        few.setup()


def write_files(tmp_path, embeddings, concepts, names=None, suffix=".csv"):
    np.save(tmp_path / "e.npy", embeddings)
    concepts_path = tmp_path / f"c{suffix}"
    if suffix == ".csv":
        np.savetxt(concepts_path, concepts, delimiter=",", fmt="%g")
    else:
        np.save(concepts_path, concepts)
    kwargs = {"embeddings_path": str(tmp_path / "e.npy"), "concepts_path": str(concepts_path)}
    if names is not None:
        (tmp_path / "names.txt").write_text("\n".join(names) + "\n")
        kwargs["concept_names_path"] = str(tmp_path / "names.txt")
    return kwargs


@pytest.mark.parametrize("suffix", [".csv", ".npy"])
def test_datamodule_from_files(tmp_path, suffix):
    rng = np.random.default_rng(0)
    embeddings, concepts = rng.normal(size=(30, 5)), rng.random((30, 3)) < 0.5
    kwargs = write_files(tmp_path, embeddings, concepts.astype(int), ["red", "round", "big"], suffix)
    dm = EmbeddingConceptDataModule(**kwargs, val_fraction=0.2, test_fraction=0.0, batch_size=64)
    dm.setup()
    assert dm.concept_names == ["red", "round", "big"] and dm.embedding_dim == 5 and dm.num_concepts == 3
    val = next(iter(dm.val_dataloader()))
    rows = dm.rows["val"]
    assert len(rows) == 6 and len(dm.rows["test"]) == 0
    np.testing.assert_allclose(val["embeddings"].numpy(), embeddings[rows].astype(np.float32))
    np.testing.assert_array_equal(val["concepts"].numpy(), concepts[rows])
    unnamed = EmbeddingConceptDataModule(**{k: v for k, v in kwargs.items() if k != "concept_names_path"})
    unnamed.setup()
    assert unnamed.concept_names == ["concept_0", "concept_1", "concept_2"]


def test_datamodule_bad_files(tmp_path):
    kwargs = write_files(tmp_path, np.zeros((4, 2)), np.array([[0, 1], [1, 0], [0.5, 1], [1, 1]]))
    with pytest.raises(ValueError, match=r"c\.csv'?: value 0\.5 at row 2, column 0 is not binary"):
        EmbeddingConceptDataModule(**kwargs).setup()
    kwargs = write_files(tmp_path, np.zeros((5, 2)), np.ones((4, 2)), suffix=".npy")
    with pytest.raises(ValueError, match=r"e\.npy' has 5 rows but concepts_path=.*c\.npy' has 4"):
        EmbeddingConceptDataModule(**kwargs).setup()
    kwargs = write_files(tmp_path, np.zeros((4, 2)), np.ones((4, 2)), ["only one"])
    with pytest.raises(ValueError, match="has 1 names for 2 concepts"):
        EmbeddingConceptDataModule(**kwargs).setup()
    with pytest.raises(FileNotFoundError, match=r"embeddings_path='/no/e\.npy': no such file"):
        EmbeddingConceptDataModule(embeddings_path="/no/e.npy", concepts_path="/no/c.npy").setup()


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({}, "give either source"),
        ({"source": "fictitious", "embeddings_path": "e.npy", "concepts_path": "c.npy"}, "give either source"),
        ({"embeddings_path": "e.npy"}, "give either source"),
        ({"source": "coco"}, "source='coco' is invalid"),
        ({"source": "fictitious", "val_fraction": 0.5, "test_fraction": 0.5}, "must be below 1"),
        ({"source": "fictitious", "batch_size": 0}, "batch_size=0 is invalid"),
    ],
)
def test_datamodule_bad_arguments(kwargs, message):
    with pytest.raises(ValueError, match=message):
        EmbeddingConceptDataModule(**kwargs)


def test_check_binary_names_the_first_other_value_for_numpy_and_torch():
    check_binary(np.array([[True, False]]), "a")  # bools and 0/1 of any dtype pass
    check_binary(torch.tensor([[0.0, 1.0], [1.0, 1.0]]), "a")
    with pytest.raises(ValueError, match=r"^x: value 2 at row 1, column 0 is not binary \(2 such entries; concept"):
        check_binary(np.array([[0, 1], [2, 3]]), "x")
    with pytest.raises(ValueError, match=r"^y: value nan at row 0, column 1 is not binary \(1 such entries"):
        check_binary(torch.tensor([[1.0, float("nan")]]), "y")
    with pytest.raises(ValueError, match=r"^z: value -1\.0 at index \(2,\) is not binary"):
        check_binary(np.array([0.0, 1.0, -1.0]), "z")
