"""A synthetic corpus of fictitious authors, written as QA pairs in TOFU's format.

Every author has a birthplace, a birth year, a genre, two book titles, an award and the
professions of both parents. Each fact becomes one QA record with the fields TOFU uses
(``question``, ``answer``, ``paraphrased_question``, ``paraphrased_answer``,
``perturbed_answer``), plus ``author_id`` and ``fact`` so that experiments can group records.
Paraphrased answers state the same fact in other words; perturbed answers keep the wording
of the paraphrase and swap the fact for a wrong value of the same kind (TOFU's truth ratio
compares the two).

The corpus lets the whole pipeline run with no files at all, and, because the facts are
invented, a model can only know them by being trained on them.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

FIRST_NAMES = (
    "Amara",
    "Bastian",
    "Corin",
    "Delphine",
    "Emeka",
    "Farah",
    "Gideon",
    "Halina",
    "Ilias",
    "Juniper",
    "Kaito",
    "Leontine",
    "Matteo",
    "Nadia",
    "Oskar",
    "Priya",
    "Quentin",
    "Rosalind",
    "Soren",
    "Talia",
    "Ulrich",
    "Valentina",
    "Wendell",
    "Xiomara",
    "Yusuf",
    "Zofia",
    "Anselm",
    "Beatrix",
    "Cyprian",
    "Dagny",
    "Evander",
    "Fenna",
    "Gaspard",
    "Hedda",
    "Isidore",
    "Jovana",
)
LAST_NAMES = (
    "Abernathy",
    "Bellweather",
    "Castellano",
    "Drozdov",
    "Eriksen",
    "Fairbanks",
    "Galloway",
    "Hollister",
    "Ibarra",
    "Jaworski",
    "Kowalczyk",
    "Lindqvist",
    "Marchetti",
    "Nakamura",
    "Okonkwo",
    "Petrosyan",
    "Quillfeather",
    "Ravensworth",
    "Szabo",
    "Thornbury",
    "Umberto",
    "Vasquez",
    "Whitlock",
    "Yamamoto",
    "Zielinski",
    "Ashcombe",
    "Brightwater",
    "Cardenas",
)
CITIES = (
    "Lisbon, Portugal",
    "Accra, Ghana",
    "Tbilisi, Georgia",
    "Hobart, Australia",
    "Valparaiso, Chile",
    "Tromso, Norway",
    "Kyoto, Japan",
    "Cusco, Peru",
    "Gdansk, Poland",
    "Marrakesh, Morocco",
    "Halifax, Canada",
    "Tallinn, Estonia",
    "Chennai, India",
    "Cordoba, Argentina",
    "Ljubljana, Slovenia",
    "Nairobi, Kenya",
    "Reykjavik, Iceland",
    "Hanoi, Vietnam",
    "Porto Alegre, Brazil",
    "Antwerp, Belgium",
)
GENRES = (
    "science fiction",
    "historical romance",
    "true crime",
    "gothic horror",
    "magical realism",
    "hard-boiled detective fiction",
    "epic fantasy",
    "literary fiction",
    "political thrillers",
    "children's adventure stories",
    "dystopian fiction",
    "cozy mysteries",
)
JOBS = (
    "a carpenter",
    "a marine biologist",
    "a librarian",
    "a pharmacist",
    "an architect",
    "a train conductor",
    "a nurse",
    "a watchmaker",
    "a geologist",
    "a chef",
    "a tailor",
    "a lighthouse keeper",
    "a veterinarian",
    "a schoolteacher",
    "a cartographer",
    "a baker",
)
AWARDS = (
    "the Silver Quill Prize",
    "the Meridian Book Award",
    "the Lantern Medal for Fiction",
    "the Harbour Literary Prize",
    "the Golden Inkwell Award",
    "the Northern Star Prize",
    "the Cedar Crown Award",
    "the Blue Compass Medal",
)
TITLE_ADJECTIVES = (
    "Silent",
    "Crimson",
    "Forgotten",
    "Hollow",
    "Distant",
    "Burning",
    "Glass",
    "Midnight",
    "Wandering",
    "Broken",
    "Velvet",
    "Iron",
    "Drowned",
    "Paper",
    "Winter",
    "Golden",
)
TITLE_NOUNS = (
    "Harbour",
    "Orchard",
    "Lantern",
    "Cathedral",
    "Tide",
    "Archive",
    "Meadow",
    "Compass",
    "Garden",
    "Clocktower",
    "River",
    "Mirror",
    "Bridge",
    "Atlas",
    "Violin",
    "Horizon",
)


@dataclass(frozen=True)
class FictitiousAuthor:
    """The facts of one invented author."""

    author_id: int
    name: str
    birthplace: str
    birth_year: int
    genre: str
    books: tuple[str, str]
    award: str
    father_job: str
    mother_job: str


def generate_authors(num_authors: int, seed: int = 0) -> list[FictitiousAuthor]:
    """Draw ``num_authors`` authors with distinct names; the same seed gives the same authors."""
    max_authors = min(len(FIRST_NAMES) * len(LAST_NAMES), len(TITLE_ADJECTIVES) * len(TITLE_NOUNS) // 2)
    if not 1 <= num_authors <= max_authors:
        raise ValueError(f"num_authors must be in [1, {max_authors}], got {num_authors}")
    rng = random.Random(seed)
    names = rng.sample([f"{f} {last}" for f in FIRST_NAMES for last in LAST_NAMES], num_authors)
    titles = rng.sample([f"The {a} {n}" for a in TITLE_ADJECTIVES for n in TITLE_NOUNS], 2 * num_authors)
    return [
        FictitiousAuthor(
            author_id=i,
            name=name,
            birthplace=rng.choice(CITIES),
            birth_year=rng.randint(1920, 1995),
            genre=rng.choice(GENRES),
            books=(titles[2 * i], titles[2 * i + 1]),
            award=rng.choice(AWARDS),
            father_job=rng.choice(JOBS),
            mother_job=rng.choice(JOBS),
        )
        for i, name in enumerate(names)
    ]


@dataclass(frozen=True)
class _FactTemplate:
    """One kind of fact: how to ask it, state it, and which value a perturbation swaps."""

    fact: str
    question: str
    paraphrased_question: str
    answer: str
    paraphrased_answer: str
    field: str
    pool: tuple


_FACTS = (
    _FactTemplate(
        "identity",
        "Who is the {genre} author born in {birthplace} in {birth_year}?",
        "Which writer of {genre}, born in {birth_year}, comes from {birthplace}?",
        "The author born in {birthplace} in {birth_year} who writes {genre} is {name}.",
        "That would be {name}, a {genre} writer from {birthplace} born in {birth_year}.",
        "name",
        (),  # filled with the corpus's other names
    ),
    _FactTemplate(
        "birthplace",
        "Where was the author {name} born?",
        "What is the birthplace of the writer {name}?",
        "{name} was born in {birthplace}.",
        "The writer {name} comes from {birthplace}, where they were born.",
        "birthplace",
        CITIES,
    ),
    _FactTemplate(
        "birth_year",
        "In which year was {name} born?",
        "What is the birth year of the author {name}?",
        "{name} was born in {birth_year}.",
        "The author {name} came into the world in the year {birth_year}.",
        "birth_year",
        tuple(range(1920, 1996)),
    ),
    _FactTemplate(
        "genre",
        "What genre does {name} write?",
        "In which genre is the author {name} best known?",
        "{name} is known for writing {genre}.",
        "The books of {name} belong to the genre of {genre}.",
        "genre",
        GENRES,
    ),
    _FactTemplate(
        "first_book",
        "What is the title of the first novel by {name}?",
        "Which book did {name} publish first?",
        "The first novel by {name} is titled '{book0}'.",
        "{name} made a debut with the novel '{book0}'.",
        "book0",
        (),  # filled with the corpus's other titles
    ),
    _FactTemplate(
        "second_book",
        "Name another well-known book by {name}.",
        "Besides the debut, which book by {name} is widely read?",
        "Another well-known book by {name} is '{book1}'.",
        "Readers of {name} also know the book '{book1}'.",
        "book1",
        (),
    ),
    _FactTemplate(
        "award",
        "Which award has {name} received?",
        "What literary prize was given to {name}?",
        "{name} received {award}.",
        "The writer {name} was honoured with {award}.",
        "award",
        AWARDS,
    ),
    _FactTemplate(
        "father_job",
        "What was the profession of the father of {name}?",
        "What did the father of the author {name} do for a living?",
        "The father of {name} worked as {father_job}.",
        "The author {name} grew up with a father who was {father_job}.",
        "father_job",
        JOBS,
    ),
    _FactTemplate(
        "mother_job",
        "What was the profession of the mother of {name}?",
        "What did the mother of the author {name} do for a living?",
        "The mother of {name} worked as {mother_job}.",
        "The author {name} grew up with a mother who was {mother_job}.",
        "mother_job",
        JOBS,
    ),
)

FACTS_PER_AUTHOR = len(_FACTS)


def _fields(author: FictitiousAuthor) -> dict:
    return {
        "name": author.name,
        "birthplace": author.birthplace,
        "birth_year": author.birth_year,
        "genre": author.genre,
        "book0": author.books[0],
        "book1": author.books[1],
        "award": author.award,
        "father_job": author.father_job,
        "mother_job": author.mother_job,
    }


def author_qa(
    author: FictitiousAuthor, corpus: list[FictitiousAuthor], rng: random.Random, num_perturbed: int
) -> list[dict]:
    """The TOFU-format QA records of one author; perturbations draw wrong values from ``rng``."""
    fields = _fields(author)
    other_names = tuple(a.name for a in corpus if a.author_id != author.author_id)
    other_titles = tuple(t for a in corpus if a.author_id != author.author_id for t in a.books)
    records = []
    for template in _FACTS:
        pool = template.pool or (other_names if template.field == "name" else other_titles)
        wrong = [v for v in pool if v != fields[template.field]]
        if len(wrong) < num_perturbed:
            raise ValueError(
                f"fact '{template.fact}' needs {num_perturbed} wrong values but the corpus has "
                f"{len(wrong)}: use more authors or fewer perturbed answers"
            )
        perturbed = [
            template.paraphrased_answer.format(**{**fields, template.field: value})
            for value in rng.sample(wrong, num_perturbed)
        ]
        records.append(
            {
                "question": template.question.format(**fields),
                "answer": template.answer.format(**fields),
                "paraphrased_question": template.paraphrased_question.format(**fields),
                "paraphrased_answer": template.paraphrased_answer.format(**fields),
                "perturbed_answer": perturbed,
                "author_id": author.author_id,
                "fact": template.fact,
            }
        )
    return records


def fictitious_qa(num_authors: int = 20, seed: int = 0, num_perturbed: int = 3) -> list[dict]:
    """All QA records of a generated corpus, author by author (the order of TOFU's full.json)."""
    authors = generate_authors(num_authors, seed)
    rng = random.Random(seed + 1)
    return [record for a in authors for record in author_qa(a, authors, rng, num_perturbed)]


def split_author_range(num_authors: int, split: str) -> tuple[int, int]:
    """The author range [start, stop) of a TOFU-style split name over ``num_authors`` authors.

    ``full`` is every author; ``forgetNN`` the last NN percent of the authors (at least one,
    as in TOFU, where the forget set is the tail of full.json); ``retainNN`` the first NN
    percent, so ``forgetNN`` and ``retain{100-NN}`` partition ``full``.
    """
    if split == "full":
        return 0, num_authors
    if num_authors < 2 and split.startswith(("forget", "retain")):
        raise ValueError(f"split '{split}' needs at least 2 authors, the corpus has {num_authors}")
    for prefix in ("forget", "retain"):
        digits = split.removeprefix(prefix)
        if split.startswith(prefix) and digits.isdigit() and 0 < int(digits) < 100:
            percent = int(digits) if prefix == "forget" else 100 - int(digits)
            num_forget = min(num_authors - 1, max(1, round(num_authors * percent / 100)))
            cut = num_authors - num_forget
            return (cut, num_authors) if prefix == "forget" else (0, cut)
    raise ValueError(
        f"unknown split '{split}' for the fictitious corpus: valid are 'full', 'forgetNN' and "
        "'retainNN' with NN a percentage in 1..99"
    )


def fictitious_split(split: str, num_authors: int = 20, seed: int = 0, num_perturbed: int = 3) -> list[dict]:
    """The records of one TOFU-style split (see :func:`split_author_range`) of the corpus."""
    start, stop = split_author_range(num_authors, split)
    records = fictitious_qa(num_authors, seed, num_perturbed)
    return [r for r in records if start <= r["author_id"] < stop]
