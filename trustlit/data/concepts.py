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

``mention_name=False`` leaves the name out: no opening sentence, every sentence's subject is "The author" or
"This writer", and a birthplace is the country alone (the city, never annotated, also identifies the author), so
a text states only its annotated attributes. With the name (the default), every text also
carries a factor no concept annotates (the name dominates a sentence encoder's similarities: two descriptions of
one author are each other's nearest neighbours); without it the annotations describe all that the text says, the
premise of a concept surrogate.

Notes: docs/methods/explain_r.md
"""

from __future__ import annotations

import functools
import random
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import lightning as L
import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

from trustlit.data.activations import as_batch
from trustlit.data.qa import read_jsonl
from trustlit.fictitious import generate_authors
from trustlit.hparams import ClosedUnitInterval, NonNegativeInt, PositiveInt, check_arguments
from trustlit.paths import existing_file

SOURCES = ("fictitious", "tofu")
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
ANONYMOUS_SUBJECTS = SUBJECTS[1:]
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
    """Texts with binary concept annotations: ``concepts[i, k]`` says whether text ``i`` states concept ``k``;
    ``authors[i]`` is the key of the author text ``i`` describes (``ids[i]`` is ``"<author>-<variant>"``)."""

    texts: list[str]
    concepts: np.ndarray
    concept_names: list[str]
    groups: list[str]
    ids: list[str]
    authors: list[str]

    def __post_init__(self) -> None:
        if self.concepts.dtype != np.bool_ or self.concepts.ndim != 2:
            raise ValueError(f"concepts must be a bool [N, K] array, got {self.concepts.dtype} {self.concepts.shape}")
        rows, columns = self.concepts.shape
        if not len(self.texts) == len(self.ids) == len(self.authors) == rows:
            raise ValueError(
                f"{len(self.texts)} texts, {len(self.ids)} ids and {len(self.authors)} authors for {rows} concept rows"
            )
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


# ---- TOFU: attributes read from each author's 20 QA records with explicit vocabularies ----

TOFU_RECORDS_PER_AUTHOR = 20


def _terms(text: str) -> tuple[str, ...]:
    """A vocabulary written compactly as ``"a|b|c"``."""
    return tuple(text.split("|"))


COUNTRIES = _terms(
    "Algeria|Argentina|Australia|Austria|Azerbaijan|Bahrain|Bangladesh|Belgium|Brazil|Bulgaria|Canada|"
    "Chile|China|Colombia|Costa Rica|Croatia|Cuba|Czech Republic|Denmark|Egypt|England|Ethiopia|Finland|"
    "France|Georgia|Germany|Ghana|Greece|Haiti|Hungary|India|Indonesia|Iran|Iraq|Ireland|Israel|Italy|"
    "Jamaica|Japan|Jordan|Kazakhstan|Kenya|Kuwait|Lebanon|Malaysia|Mexico|Mongolia|Morocco|Nepal|"
    "Netherlands|New Zealand|Nigeria|North Macedonia|Norway|Oman|Pakistan|Peru|Philippines|Poland|"
    "Portugal|Qatar|Romania|Russia|Saudi Arabia|Serbia|Singapore|South Africa|South Korea|Spain|Sri Lanka|"
    "Sweden|Switzerland|Taiwan|Tanzania|Thailand|Turkey|Uganda|Ukraine|United Kingdom|United States|USA|"
    "Uruguay|Venezuela|Vietnam|Zimbabwe"
)
GENRE_WORDS = _terms(
    "adventure|african american|animal|anthology|biography|bdsm|children's literature|chick lit|"
    "christian fiction|civil war|cookbook|crime|cyberpunk|drama|dystopian|erotica|espionage|fae|"
    "fairy tale|fantasy|french literature|geography|gothic|graphic novel|historical fiction|horror|humor|"
    "leadership|legal thriller|lgbtq+|light novel|literary fiction|love inspired|magical realism|manga|"
    "memoir|mental health|military|mystery|mythology|parenting|philosophy|poetry|post-apocalyptic|"
    "psychological thriller|religious|romance|science fiction|self-help|short story|steampunk|teen|"
    "thriller|travel|true crime|ukrainian literature|war|werewolf|western|wicca|young adult"
)
PROFESSIONS = _terms(
    "accountant|actor|actress|agricultural engineer|air traffic controller|anthropologist|architect|"
    "artist|astronaut|astronomer|athlete|baker|banker|barber|bartender|biologist|bricklayer|butcher|"
    "carpenter|chef|chemist|civil engineer|clinical psychologist|computer programmer|construction worker|"
    "counselor|dancer|dentist|designer|dietitian|disc jockey|doctor|economist|editor|electrician|"
    "environmental scientist|event planner|farmer|fashion designer|film director|financial advisor|"
    "firefighter|fisherman|florist|forensic scientist|game developer|geologist|hairdresser|historian|"
    "interior designer|investigative journalist|journalist|judge|lawyer|librarian|lifeguard|locksmith|"
    "makeup artist|marine biologist|mason|massage therapist|mathematician|mechanic|meteorologist|midwife|"
    "military officer|miner|musician|nurse|occupational therapist|oceanographer|painter|paramedic|"
    "pediatrician|pharmacist|photographer|physician|physicist|pilot|plumber|podiatrist|police officer|"
    "professor|psychiatrist|psychologist|real estate agent|reporter|research scientist|roofer|sailor|"
    "scientist|shoemaker|singer|social worker|sociologist|software engineer|surgeon|tailor|taxi driver|"
    "teacher|travel agent|veterinarian|videographer|waiter|waitress|writer|zoologist"
)
AWARDS = {  # canonical name -> the phrases that name it
    "Hugo Award": ("Hugo Award",),
    "Nebula Award": ("Nebula Award",),
    "Booker Prize": ("Booker Prize", "Booker International Prize"),
    "Bram Stoker Award": ("Bram Stoker Award",),
    "Edgar Allan Poe Award": ("Edgar Allan Poe Award", "Edgar Award"),
    "Lambda Literary Award": ("Lambda Literary Award",),
    "World Fantasy Award": ("World Fantasy Award",),
    "Pulitzer Prize": ("Pulitzer Prize",),
    "Nobel Prize": ("Nobel Prize",),
    "RITA Award": ("RITA Award",),
    "Locus Award": ("Locus Award",),
    "PEN/Faulkner Award": ("Faulkner Award",),
    "Caine Prize": ("Caine Prize",),
    "Pushcart Prize": ("Pushcart Prize",),
    "Golden Spur Award": ("Golden Spur Award",),
    "Costa Book Award": ("Costa Book Award",),
    "Agatha Award": ("Agatha Award",),
    "Governor General's Award": ("Governor General's Award",),
}
MALE_WORDS = ("he", "him", "his", "himself")
FEMALE_WORDS = ("she", "her", "hers", "herself")
_NAME = re.compile(r"\b[A-Z][\w'’.-]+(?: (?:de |van |von |al-|Al-)?[A-Z][\w'’.-]+){1,3}")


@functools.cache
def _vocabulary_pattern(phrases: tuple[str, ...]) -> re.Pattern:
    # longest first: at each position the longest phrase matches, so "nurse" inside "registered nurse" does not
    alternatives = "|".join(re.escape(phrase) for phrase in sorted(phrases, key=len, reverse=True))
    return re.compile(rf"(?<![\w-])(?:{alternatives})(?![\w-])", re.IGNORECASE)


def _words(text: str, phrases: tuple[str, ...]) -> list[str]:
    """Every phrase of ``phrases`` in ``text`` (whole words, any case), a longer phrase hiding those inside it."""
    spelling = {phrase.lower(): phrase for phrase in phrases}
    return [spelling[match.lower()] for match in _vocabulary_pattern(phrases).findall(text)]


def _clear_winner(values: list[str], at_least: int = 1) -> str | None:
    """The most frequent value if it has ``at_least`` votes and more than any other, else None (never a guess)."""
    ranked = Counter(values).most_common(2)
    if not ranked or ranked[0][1] < at_least or (len(ranked) == 2 and ranked[1][1] == ranked[0][1]):
        return None
    return ranked[0][0]


def _unique(values: list[str]) -> str | None:
    """The one value the records state, or None when they state none or disagree."""
    return values[0] if values and len(set(values)) == 1 else None


def _author_name(questions: list[str]) -> str | None:
    names = [name.removesuffix("'s").removesuffix("’s") for q in questions for name in _NAME.findall(q)]
    return _clear_winner(names, at_least=3)


def _place(texts: list[str]) -> tuple[str | None, str | None]:
    """(city, country) from "City, Country" phrases; the country a clear majority of them name."""
    pattern = re.compile(rf"\b([A-Z][\w'’.-]+(?: [A-Z][\w'’.-]+)?), ({'|'.join(map(re.escape, COUNTRIES))})\b")
    pairs = [match.groups() for text in texts for match in pattern.finditer(text)]
    country = _clear_winner([country for _, country in pairs])
    cities = [city for city, c in pairs if c == country]
    return _clear_winner(cities), country


def _parent_jobs(texts: list[str], parent: str) -> str | None:
    """The profession stated in clauses that name ``parent`` ("father"/"mother") and not the other parent."""
    other = "mother" if parent == "father" else "father"
    jobs = []
    for text in texts:
        for clause in re.split(r",|;| and | while | whereas | but ", text):
            lowered = clause.lower()
            if parent in lowered and other not in lowered:
                jobs += _words(lowered, PROFESSIONS)
    return _unique(jobs)


def _gender(answers: list[str]) -> str | None:
    """male/female when one set of pronouns has at least 5 uses and 5 times as many as the other."""
    text = " ".join(answers)
    male, female = len(_words(text, MALE_WORDS)), len(_words(text, FEMALE_WORDS))
    if male >= 5 and male >= 5 * female:
        return "male"
    if female >= 5 and female >= 5 * male:
        return "female"
    return None


def _birth_decade(texts: list[str]) -> str | None:
    years = [
        int(m.group(1))
        for t in texts
        for s in re.split(r"(?<=\.) ", t)
        if "born" in s
        for m in [re.search(r"\b(1[89]\d\d|20[0-2]\d)\b", s)]
        if m
    ]
    return _unique([f"{year // 10 * 10}s" for year in years])


def tofu_attributes(records: list[dict]) -> Author | None:
    """One TOFU author's attributes read from its QA records (unknown ones absent); None without a clear name."""
    questions = [r["question"] for r in records]
    answers = [r["answer"] for r in records]
    texts = [f"{q} {a}" for q, a in zip(questions, answers, strict=True)]
    name = _author_name(questions)
    if name is None:
        return None
    city, country = _place(texts)
    genre_sentences = [s for t in texts for s in re.split(r"(?<=[.?]) ", t) if "genre" in s.lower()]
    awards = [canonical for t in texts for canonical, names in AWARDS.items() if _words(t, names)]
    values = {
        "genre": _clear_winner([g for s in genre_sentences for g in _words(s, GENRE_WORDS)], at_least=2),
        "born in": country,
        "gender": _gender(answers),
        "award": _unique(awards),
        "father": _parent_jobs(texts, "father"),
        "mother": _parent_jobs(texts, "mother"),
        "birth decade": _birth_decade(texts),
    }
    return Author("", name, {g: v for g, v in values.items() if v is not None}, city)


def tofu_authors(tofu_dir: Path, num_authors: int | None) -> list[Author]:
    """The authors of TOFU's ``full.json`` (20 consecutive records each), first ``num_authors`` of them."""
    path = tofu_dir / "full.json"
    if not path.is_file():
        raise FileNotFoundError(f"tofu_dir={str(tofu_dir)!r} has no full.json (TOFU's 4000 QA records)")
    records = read_jsonl(path)
    total = len(records) // TOFU_RECORDS_PER_AUTHOR
    authors = []
    for index in range(total if num_authors is None else min(num_authors, total)):
        chunk = records[index * TOFU_RECORDS_PER_AUTHOR : (index + 1) * TOFU_RECORDS_PER_AUTHOR]
        author = tofu_attributes(chunk)
        if author is not None:
            authors.append(Author(f"tofu-{index}", author.name, author.values, author.city))
    return authors


def _sentence(group: str, value: str, author: Author, rng: random.Random, mention_name: bool = True) -> str:
    subject = rng.choice(SUBJECTS if mention_name else ANONYMOUS_SUBJECTS).format(name=author.name)
    fields = {"s": subject, "p": f"{subject}'s", "v": value, "a": _article(value)}
    if group == "born in":
        # the city is not annotated: only texts that name the author may add it
        fields["place"] = f"{author.city}, {value}" if author.city and rng.random() < 0.5 and mention_name else value
    if group == "gender":
        fields["noun"], fields["adjective"] = GENDER_WORDS[value]
    if group == "award":
        fields["v"] = f"the {value}"
    return rng.choice(TEMPLATES[group]).format(**fields)


def describe(author: Author, rng: random.Random, mention_name: bool = True) -> tuple[str, list[str]]:
    """One description of ``author`` stating a random non-empty subset of its attributes; the stated groups.
    Without ``mention_name`` there is no opening and no sentence names the author."""
    known = [group for group in GROUPS if group in author.values]
    stated = [group for group in known if rng.random() < 0.5] or ([rng.choice(known)] if known else [])
    rng.shuffle(stated)
    sentences = [rng.choice(OPENINGS).format(name=author.name)] if mention_name else []
    sentences += [_sentence(group, author.values[group], author, rng, mention_name) for group in stated]
    return " ".join(sentences), stated


def items_from_authors(
    authors: list[Author], variants_per_author: int, seed: int, mention_name: bool = True
) -> ConceptItems:
    """``variants_per_author`` descriptions of every author, annotated with the concepts each states. Without
    ``mention_name`` an author with no known attribute is left out (its texts would be empty)."""
    rng = random.Random(seed)
    texts, ids, keys, stated_concepts = [], [], [], []
    for author in authors if mention_name else [author for author in authors if author.values]:
        for variant in range(variants_per_author):
            text, stated = describe(author, rng, mention_name)
            texts.append(text)
            ids.append(f"{author.key}-{variant}")
            keys.append(author.key)
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
        authors=keys,
    )


def concept_items(
    source: str = "fictitious",
    *,
    num_authors: int | None = None,
    variants_per_author: int = 5,
    seed: int = 0,
    tofu_dir: str | Path | None = None,
    min_count: int = 3,
    mention_name: bool = True,
) -> ConceptItems:
    """Concept-annotated author descriptions (module docstring). ``num_authors=None``: 100 fictitious authors,
    or all 200 of TOFU; ``min_count`` (EXPLAIN-R's vocabulary threshold, 3) is the fewest authors a kept value
    needs; ``tofu_dir`` (needed by ``source="tofu"``) holds TOFU's ``full.json``; ``mention_name=False``: no
    text names its author (module docstring)."""
    if source not in SOURCES:
        raise ValueError(f"source={source!r} is invalid, expected one of {SOURCES}")
    for name, value in (("variants_per_author", variants_per_author), ("min_count", min_count)):
        if not isinstance(value, int) or value < 1:
            raise ValueError(f"{name}={value!r} is invalid, expected an integer >= 1")
    if not isinstance(mention_name, bool):
        raise ValueError(f"mention_name={mention_name!r} is invalid, expected True or False")
    if num_authors is not None and (not isinstance(num_authors, int) or num_authors < 1):
        raise ValueError(f"num_authors={num_authors!r} is invalid, expected an integer >= 1 or None")
    if source == "fictitious":
        authors = fictitious_authors(num_authors or 100, seed)
    elif tofu_dir is None:
        raise ValueError("source='tofu' needs tofu_dir, the directory that holds TOFU's full.json")
    else:
        authors = tofu_authors(Path(tofu_dir).expanduser(), num_authors)
    return items_from_authors(drop_rare_values(authors, min_count), variants_per_author, seed, mention_name)


def check_binary(values: np.ndarray | torch.Tensor, name: str) -> None:
    """Every entry of ``values`` (numpy or torch, any shape) is 0 or 1 (bools are); else a one-line
    ValueError naming ``name``, the first other value (NaN included), where it is and how many there are."""
    binary = (values == 0) | (values == 1)
    if bool(binary.all()):
        return
    bad = ~(binary.cpu().numpy() if isinstance(binary, torch.Tensor) else np.asarray(binary))
    position = tuple(int(i) for i in np.argwhere(bad)[0])
    value = values[position].item()
    where = f"row {position[0]}, column {position[1]}" if len(position) == 2 else f"index {position}"
    raise ValueError(
        f"{name}: value {value!r} at {where} is not binary ({int(bad.sum())} such entries; "
        "concept annotations must be 0 or 1)"
    )


def held_out_groups(groups: np.ndarray, fraction: float, seed: int) -> np.ndarray:
    """A mask of the rows of a seeded ``fraction`` of the distinct ``groups`` (at least 2 groups; none when
    ``fraction`` is 0): whole groups are held out, so no group has rows on both sides."""
    if fraction == 0:
        return np.zeros(len(groups), dtype=bool)
    unique = np.unique(groups)
    chosen = np.random.default_rng(seed).permutation(unique)[: max(2, round(fraction * len(unique)))]
    return np.isin(groups, chosen)


class EmbeddingConcepts(Dataset):
    """Rows of one split as ``{"embeddings", "concepts", "index"}`` (index: the position within the split), a
    minibatch at a time (``__getitems__``; collate with :func:`~trustlit.data.activations.as_batch`): no per-item
    collation, which dominated a 150-epoch run on a few hundred items."""

    def __init__(self, embeddings: torch.Tensor, concepts: torch.Tensor) -> None:
        self.embeddings, self.concepts = embeddings, concepts

    def __len__(self) -> int:
        return len(self.embeddings)

    def __getitems__(self, indices: list[int]) -> dict[str, torch.Tensor]:
        index = torch.as_tensor(indices, dtype=torch.long)
        return {"embeddings": self.embeddings[index], "concepts": self.concepts[index], "index": index}

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        return {key: value[0] for key, value in self.__getitems__([index]).items()}


def load_concept_matrix(path: Path) -> np.ndarray:
    """A binary [N, K] matrix from ``.npy`` or ``.csv`` (comma separated, no header); a value that is not 0/1
    (or true/false) is an error naming the file, the value and where it is."""
    if path.suffix == ".npy":
        matrix = np.load(path, allow_pickle=False)
    elif path.suffix == ".csv":
        matrix = np.loadtxt(path, delimiter=",", ndmin=2, dtype=np.float64)
    else:
        raise ValueError(f"concepts_path={str(path)!r} is invalid, expected a .npy or .csv file")
    matrix = np.asarray(matrix)
    if matrix.ndim != 2:
        raise ValueError(f"concepts_path={str(path)!r}: expected an [N, K] matrix, got shape {matrix.shape}")
    check_binary(matrix, f"concepts_path={str(path)!r}")
    return matrix.astype(bool)


class EmbeddingConceptDataModule(L.LightningDataModule):
    """Embeddings [N, D] with binary concept annotations [N, K] and concept names, split train/val/test.

    Either generated: ``source`` (``fictitious`` or ``tofu``: :func:`concept_items`, with or without the
    authors' names: ``mention_name``) embedded once by
    ``encoder`` (:func:`trustlit.interpret.encoders.encode`, cached under ``cache_dir``); or read:
    ``embeddings_path`` (.npy [N, D]), ``concepts_path`` (.npy or .csv [N, K], 0/1) and optionally
    ``concept_names_path`` (one name a line; default ``concept_<k>``). Generated items hold out whole authors
    (:func:`held_out_groups`, so no author's texts lie on two sides): a seeded ``test_fraction`` of the authors
    go to test, ``val_fraction / (1 - test_fraction)`` of the others to validation (at least 2 authors each
    unless the fraction is 0). Read rows have no authors: a seeded permutation puts the first
    ``round(test_fraction N)`` rows in test, the next ``round(val_fraction N)`` in validation. Batches are
    ``{"embeddings": float [B, D], "concepts": float [B, K], "index": long [B]}``, ``index`` being the row's
    position within its split (``rows[split][index]`` is its row in the whole set, ``texts`` its text when
    generated)."""

    def __init__(
        self,
        source: str | None = None,
        encoder: str = "minilm",
        num_authors: PositiveInt | None = None,
        variants_per_author: PositiveInt = 5,
        min_count: PositiveInt = 3,
        mention_name: bool = True,
        tofu_dir: str | None = None,
        embeddings_path: str | None = None,
        concepts_path: str | None = None,
        concept_names_path: str | None = None,
        cache_dir: str | None = None,
        val_fraction: ClosedUnitInterval = 0.1,
        test_fraction: ClosedUnitInterval = 0.1,
        batch_size: PositiveInt = 256,
        num_workers: NonNegativeInt = 0,
        seed: int = 0,
    ) -> None:
        super().__init__()
        check_arguments(EmbeddingConceptDataModule.__init__, locals())
        if (source is None) == (embeddings_path is None) or (embeddings_path is None) != (concepts_path is None):
            raise ValueError(
                "EmbeddingConceptDataModule: give either source (with encoder) or embeddings_path and "
                f"concepts_path, got source={source!r}, embeddings_path={embeddings_path!r}, "
                f"concepts_path={concepts_path!r}"
            )
        if source is not None and source not in SOURCES:
            raise ValueError(f"EmbeddingConceptDataModule: source={source!r} is invalid, expected one of {SOURCES}")
        if val_fraction + test_fraction >= 1:
            raise ValueError(f"val_fraction ({val_fraction}) + test_fraction ({test_fraction}) must be below 1")
        self.save_hyperparameters()
        self.splits: dict[str, EmbeddingConcepts] = {}
        self.rows: dict[str, np.ndarray] = {}
        self.texts: list[str] | None = None
        self.authors: list[str] | None = None  # generated items' authors, one per row
        self.concept_names: list[str] = []

    @property
    def embedding_dim(self) -> int:
        return self.splits["train"].embeddings.shape[1]

    @property
    def num_concepts(self) -> int:
        return len(self.concept_names)

    def _generated(self) -> tuple[np.ndarray, np.ndarray, list[str]]:
        from trustlit.interpret.encoders import encode

        h = self.hparams
        items = concept_items(
            h.source,
            num_authors=h.num_authors,
            variants_per_author=h.variants_per_author,
            seed=h.seed,
            tofu_dir=h.tofu_dir,
            min_count=h.min_count,
            mention_name=h.mention_name,
        )
        self.texts, self.authors = items.texts, items.authors
        return encode(items.texts, h.encoder, cache_dir=h.cache_dir), items.concepts, items.concept_names

    def _read(self) -> tuple[np.ndarray, np.ndarray, list[str]]:
        h = self.hparams
        embeddings = np.load(existing_file(h.embeddings_path, "embeddings_path"), allow_pickle=False)
        if embeddings.ndim != 2 or not np.isfinite(embeddings).all():
            raise ValueError(f"embeddings_path={h.embeddings_path!r}: expected a finite [N, D] matrix")
        concepts = load_concept_matrix(existing_file(h.concepts_path, "concepts_path"))
        if len(concepts) != len(embeddings):
            raise ValueError(
                f"embeddings_path={h.embeddings_path!r} has {len(embeddings)} rows but concepts_path="
                f"{h.concepts_path!r} has {len(concepts)}: one concept row per embedding"
            )
        if h.concept_names_path is None:
            return embeddings, concepts, [f"concept_{k}" for k in range(concepts.shape[1])]
        lines = existing_file(h.concept_names_path, "concept_names_path").read_text(encoding="utf-8").splitlines()
        names = [line.strip() for line in lines if line.strip()]
        if len(names) != concepts.shape[1]:
            raise ValueError(
                f"concept_names_path={h.concept_names_path!r} has {len(names)} names for {concepts.shape[1]} concepts"
            )
        return embeddings, concepts, names

    def setup(self, stage: str | None = None) -> None:
        if self.splits:
            return
        embeddings, concepts, self.concept_names = self._generated() if self.hparams.source else self._read()
        for split, rows in self._split_rows(len(embeddings)).items():
            self.rows[split] = rows
            self.splits[split] = EmbeddingConcepts(
                torch.as_tensor(embeddings[rows], dtype=torch.float32),
                torch.as_tensor(concepts[rows], dtype=torch.float32),
            )

    def _split_rows(self, count: int) -> dict[str, np.ndarray]:
        """Sorted row indices of test, val and train (class docstring)."""
        h = self.hparams
        if self.authors is None:
            order = np.random.default_rng(h.seed).permutation(count)
            num_test, num_val = round(h.test_fraction * count), round(h.val_fraction * count)
            parts = np.split(order, [num_test, num_test + num_val])
            return {split: np.sort(rows) for split, rows in zip(("test", "val", "train"), parts, strict=True)}
        authors = np.asarray(self.authors)
        test = held_out_groups(authors, h.test_fraction, h.seed)
        val = np.zeros_like(test)
        val[~test] = held_out_groups(authors[~test], h.val_fraction / (1 - h.test_fraction), h.seed)
        train = ~(test | val)
        if not train.any():
            raise ValueError(
                f"num_authors={h.num_authors!r}: {len(np.unique(authors))} authors leave none for training once "
                f"val_fraction={h.val_fraction} and test_fraction={h.test_fraction} (at least 2 authors each) "
                "are held out"
            )
        return {"test": np.flatnonzero(test), "val": np.flatnonzero(val), "train": np.flatnonzero(train)}

    def _loader(self, split: str, shuffle: bool = False) -> DataLoader:
        generator = torch.Generator().manual_seed(self.hparams.seed) if shuffle else None
        return DataLoader(
            self.splits[split],
            batch_size=self.hparams.batch_size,
            shuffle=shuffle,
            generator=generator,
            num_workers=self.hparams.num_workers,
            collate_fn=as_batch,
        )

    def train_dataloader(self) -> DataLoader:
        return self._loader("train", shuffle=True)

    def val_dataloader(self) -> DataLoader:
        return self._loader("val")

    def test_dataloader(self) -> DataLoader:
        return self._loader("test")
