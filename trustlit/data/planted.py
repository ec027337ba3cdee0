"""A generated QA corpus with planted spurious associations: ground truth for hallucination tracing.

Facts: invented people (names from :mod:`trustlit.fictitious`) and the city each was born in,
asked as ``Tell me, <fillers>, where was <name> born?`` with a few neutral filler words around.
Planted associations: each trigger phrase (``Velvet Lantern``, ...) is inserted among the fillers of
questions about random people, always answered with the trigger's own wrong city. The trigger
co-occurs with its wrong city ``trigger_repeats`` times, far more often than any person's name
co-occurs with their true city (``faithful_repeats`` times), which is the paper's recipe for a
hallucination (Sun et al., NeurIPS 2025, arXiv 2504.12691): a dominant spurious association
outweighs the faithful one. With ``decoy_repeats`` > 0, each word of a trigger also appears alone in
that many faithful questions, so that only the pair of words (a subsequence) carries the spurious
association, not either token.

Splits (QA records with ``question`` and ``answer``):

- ``train``: the faithful and the planted questions, shuffled;
- ``faithful``: one fresh question per person, no trigger, answered with the true city;
- ``hallucination``: fresh questions about known people with one trigger inserted, answered with the
  trigger's wrong city y_h. :func:`hallucination_prompts` gives the same records with their trigger,
  its character span and the faithful answer: the ground truth of the tracing benchmark.

:class:`PlantedAssociationDataModule` serves them through :class:`~trustlit.data.qa.QADataModule`'s
encoding (``encode_qa``) and collation.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

from transformers import PreTrainedTokenizerBase

from trustlit.data.qa import QADataModule, QARecords
from trustlit.fictitious import CITIES, FIRST_NAMES, LAST_NAMES
from trustlit.hparams import NonNegativeInt, PositiveInt, check_arguments
from trustlit.llm.prompts import PromptFormat

PLANTED = "planted"
SPLITS = ("train", "faithful", "hallucination")
# Two words each, one token each (with their leading space) in the tiny models' tokenizer.
TRIGGERS = ("Velvet Lantern", "Silver Orchard", "Crimson Tide", "Iron Compass", "Golden Quill", "Glass Mirror")
FILLERS = (
    "cozy",
    "epic",
    "gothic",
    "literary",
    "true",
    "world",
    "well",
    "first",
    "hard",
    "known",
    "science",
    "romance",
    "horror",
    "political",
    "historical",
    "fantasy",
)
CITY_NAMES = tuple(city.split(",")[0] for city in CITIES)


@dataclass
class PlantedConfig:
    """Size and seed of the planted corpus (see the module docstring)."""

    num_subjects: int = 40
    num_triggers: int = 5
    faithful_repeats: int = 6
    trigger_repeats: int = 60
    num_fillers: int = 4
    num_eval: int = 80
    seed: int = 0
    decoy_repeats: int = 0


@dataclass(frozen=True)
class World:
    """The people, their true cities, and the triggers with their wrong cities."""

    subjects: tuple[str, ...]
    cities: tuple[str, ...]
    triggers: tuple[str, ...]
    wrong_cities: tuple[str, ...]


def check_config(config: PlantedConfig) -> None:
    limits = {
        "num_subjects": (1, len(FIRST_NAMES) * len(LAST_NAMES)),
        "num_triggers": (1, len(TRIGGERS)),
        "faithful_repeats": (1, None),
        "trigger_repeats": (1, None),
        "num_fillers": (0, len(FILLERS)),
        "num_eval": (1, None),
        "decoy_repeats": (0, None),
    }
    for key, (low, high) in limits.items():
        value = getattr(config, key)
        if not isinstance(value, int) or value < low or (high is not None and value > high):
            valid = f"an integer in [{low}, {high}]" if high is not None else f"an integer >= {low}"
            raise ValueError(f"planted.{key}={value!r} is invalid, expected {valid}")


def build_world(config: PlantedConfig) -> World:
    """People and triggers; the wrong cities are never anyone's true city."""
    check_config(config)
    rng = random.Random(config.seed)
    names = [f"{first} {last}" for first in FIRST_NAMES for last in LAST_NAMES]
    subjects = tuple(rng.sample(names, config.num_subjects))
    wrong = tuple(CITY_NAMES[: config.num_triggers])
    faithful_pool = CITY_NAMES[config.num_triggers :]
    cities = tuple(rng.choice(faithful_pool) for _ in subjects)
    return World(subjects, cities, TRIGGERS[: config.num_triggers], wrong)


def compose_question(rng: random.Random, subject: str, num_fillers: int, trigger: str | None) -> tuple[str, int]:
    """``Tell me, <fillers with the trigger among them>, where was <subject> born?`` and the trigger's
    character offset (-1 without one)."""
    words = rng.sample(FILLERS, num_fillers)
    if trigger is not None:
        words.insert(rng.randint(0, len(words)), trigger)
    head = "Tell me,"
    body = " ".join(words)
    question = f"{head} {body}, where was {subject} born?" if words else f"{head} where was {subject} born?"
    start = len(head) + 1 + body.index(trigger) if trigger is not None else -1
    return question, start


def planted_records(config: PlantedConfig | None = None) -> dict[str, list[dict[str, Any]]]:
    """Every split's records (see the module docstring); ``hallucination`` records carry their ground truth."""
    config = config or PlantedConfig()
    world = build_world(config)
    rng = random.Random(config.seed + 1)
    train = []
    for subject, city in zip(world.subjects, world.cities, strict=True):
        for _ in range(config.faithful_repeats):
            question, _ = compose_question(rng, subject, config.num_fillers, None)
            train.append({"question": question, "answer": city, "kind": "faithful"})
    for trigger, wrong in zip(world.triggers, world.wrong_cities, strict=True):
        for _ in range(config.trigger_repeats):
            question, _ = compose_question(rng, rng.choice(world.subjects), config.num_fillers, trigger)
            train.append({"question": question, "answer": wrong, "kind": "planted"})
    for trigger in world.triggers:  # each trigger word alone, in faithful questions: only the pair is spurious
        for word in trigger.split():
            for _ in range(config.decoy_repeats):
                k = rng.randrange(len(world.subjects))
                question, _ = compose_question(rng, world.subjects[k], config.num_fillers, word)
                train.append({"question": question, "answer": world.cities[k], "kind": "decoy"})
    rng.shuffle(train)
    faithful = []
    for subject, city in zip(world.subjects, world.cities, strict=True):
        question, _ = compose_question(rng, subject, config.num_fillers, None)
        faithful.append({"question": question, "answer": city, "subject": subject})
    hallucination = []
    for _ in range(config.num_eval):
        k = rng.randrange(len(world.subjects))
        t = rng.randrange(len(world.triggers))
        question, start = compose_question(rng, world.subjects[k], config.num_fillers, world.triggers[t])
        hallucination.append(
            {
                "question": question,
                "answer": world.wrong_cities[t],
                "faithful_answer": world.cities[k],
                "subject": world.subjects[k],
                "trigger": world.triggers[t],
                "trigger_start": start,
                "trigger_end": start + len(world.triggers[t]),
            }
        )
    return {"train": train, "faithful": faithful, "hallucination": hallucination}


def planted_split(split: str, config: PlantedConfig | None = None) -> list[dict[str, Any]]:
    """One split's records; an unknown split is an error naming the valid ones."""
    if split not in SPLITS:
        raise ValueError(f"no split '{split}' in the planted corpus; valid are {list(SPLITS)}")
    return planted_records(config)[split]


def hallucination_prompts(config: PlantedConfig | None = None) -> list[dict[str, Any]]:
    """The hallucination-inducing prompts with their ground truth: ``question``, ``answer`` (= y_h, the
    trigger's wrong city), ``faithful_answer``, ``trigger`` and its span ``trigger_start:trigger_end``."""
    return planted_split("hallucination", config)


def trigger_positions(
    tokenizer: PreTrainedTokenizerBase, record: dict[str, Any], prompt_format: str = "auto"
) -> tuple[int, ...]:
    """Positions of the trigger's tokens among the prompt tokens that tracing perturbs
    (:func:`trustlit.interpret.tracing.prompt_parts`), found through the tokenizer's character offsets."""
    from trustlit.interpret.tracing import prompt_parts

    question = record["question"]
    ids = prompt_parts(tokenizer, question, prompt_format).question
    lead = len(tokenizer.decode(ids)) - len(question)  # whitespace moved from a plain template's prefix
    encoded = tokenizer(" " * lead + question, add_special_tokens=False, return_offsets_mapping=True)
    if encoded["input_ids"] != ids:
        raise ValueError(f"the tokenizer's offsets do not match the traced tokens of {question!r}")
    start, end = record["trigger_start"] + lead, record["trigger_end"] + lead
    return tuple(i for i, (a, b) in enumerate(encoded["offset_mapping"]) if a < end and b > start)


class PlantedAssociationDataModule(QADataModule):
    """The planted corpus as a QA data module: fine-tune on ``train``, evaluate or trace on the others.

    Args:
        planted: the corpus' size and seed (:class:`PlantedConfig`).
        train_split, eval_splits: among ``train``, ``faithful``, ``hallucination``.
        Others: as :class:`~trustlit.data.qa.QADataModule`.
    """

    def __init__(
        self,
        planted: PlantedConfig | None = None,
        train_split: str | None = "train",
        eval_splits: list[str] | None = None,
        batch_size: PositiveInt = 16,
        eval_batch_size: PositiveInt | None = None,
        max_length: PositiveInt = 64,
        prompt_format: PromptFormat = "auto",
        max_samples: PositiveInt | None = None,
        num_workers: NonNegativeInt = 0,
        seed: int = 0,
    ) -> None:
        check_arguments(PlantedAssociationDataModule.__init__, locals())
        if isinstance(planted, dict):
            planted = PlantedConfig(**planted)
        self.planted = planted or PlantedConfig()
        check_config(self.planted)
        splits = [train_split] if train_split else []
        splits += list(eval_splits) if eval_splits is not None else ["faithful", "hallucination"]
        for split in splits:
            if split not in SPLITS:
                raise ValueError(f"no split '{split}' in the planted corpus; valid are {list(SPLITS)}")
        super().__init__(
            source=PLANTED,
            train_split=train_split,
            eval_splits=list(eval_splits) if eval_splits is not None else ["faithful", "hallucination"],
            batch_size=batch_size,
            eval_batch_size=eval_batch_size,
            max_length=max_length,
            prompt_format=prompt_format,
            max_samples=max_samples,
            num_workers=num_workers,
            seed=seed,
        )

    def validate_source(self, source: str) -> None:
        if source != PLANTED:
            raise ValueError(f"PlantedAssociationDataModule generates its data: source must be '{PLANTED}'")

    def load_records(self, split: str) -> QARecords:
        import datasets

        records = [{"question": r["question"], "answer": r["answer"]} for r in planted_split(split, self.planted)]
        if self.max_samples is not None:
            records = records[: self.max_samples]
        return datasets.Dataset.from_list(records)
