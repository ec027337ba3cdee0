"""Relaxed-membership neighbourhoods and the poisoning attack on membership inference (trustlit.audit)."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

from trustlit.audit.mia_poisoning import (
    check_same_tokenizer,
    craft_poison,
    craft_poisons,
    decisions,
    fine_tune,
    membership_scores,
    poisoned_training_set,
    run_poisoning_experiment,
)
from trustlit.audit.neighbourhood import (
    Neighbourhood,
    edit_distance,
    embedding_cosine,
    in_neighbourhood,
    levenshtein,
    ngram_overlap,
    word_ngrams,
)
from trustlit.fictitious import fictitious_qa
from trustlit.llm.loading import build_tiny_causal_lm, build_tokenizer

CHEAP = Neighbourhood(("ngram", "edit"))


@pytest.fixture(scope="module")
def tiny() -> tuple:
    torch.set_num_threads(1)
    return build_tiny_causal_lm(seed=0)


@pytest.fixture(scope="module")
def records() -> list[dict]:
    return [{"question": r["question"], "answer": r["answer"]} for r in fictitious_qa(num_authors=20)]


# --------------------------------------------------------------------------- neighbourhood predicates


def test_ngram_overlap_counted_by_hand() -> None:
    # target 3-grams: (the cat sat) (cat sat on) (sat on the) (on the mat); the candidate holds the first two
    assert ngram_overlap("The cat sat on the mat", "the cat sat on a rug", n=3) == pytest.approx(2 / 4)
    assert ngram_overlap("The cat sat on the mat", "a dog", n=3) == 0.0
    assert ngram_overlap("short text", "short text here", n=3) == 1.0  # fewer words than n: the words as one gram
    assert word_ngrams("A, b! c", 2) == {("a", "b"), ("b", "c")}


def test_edit_distance_by_hand() -> None:
    assert levenshtein("kitten", "sitting") == 3  # k->s, e->i, +g
    assert levenshtein("", "abc") == 3 and levenshtein("flaw", "lawn") == 2
    assert edit_distance("kitten", "sitting") == pytest.approx(3 / 7)
    assert edit_distance("", "") == 0.0


def test_levenshtein_agrees_with_the_textbook_recursion() -> None:
    def textbook(a: str, b: str) -> int:
        row = list(range(len(b) + 1))
        for i, x in enumerate(a, 1):
            previous, row[0] = row[:], i
            for j, y in enumerate(b, 1):
                row[j] = min(previous[j] + 1, row[j - 1] + 1, previous[j - 1] + (x != y))
        return row[-1]

    rng = np.random.default_rng(0)
    for _ in range(200):
        a, b = ("".join(rng.choice(list("abc"), rng.integers(0, 10))) for _ in range(2))
        assert levenshtein(a, b) == textbook(a, b)


def test_embedding_cosine_of_identical_is_one_and_unrelated_is_low() -> None:
    cosine = embedding_cosine("The author was born in Paris.", ["The author was born in Paris.", "Bananas are yellow."])
    assert cosine[0] == pytest.approx(1.0, abs=1e-5)
    assert cosine[1] < 0.5
    neighbourhood = Neighbourhood(("embedding",))
    assert neighbourhood.contains("The author was born in Paris.", "The writer was born in Paris.")


def test_neighbourhood_is_the_union_of_its_criteria() -> None:
    target = "Evander Zielinski was born in Hanoi, Vietnam."
    assert in_neighbourhood(target, target)
    assert not CHEAP.contains(target, "Bananas are yellow and grow in bunches.")
    assert Neighbourhood(("edit",)).contains(target, "Evander Zielinski was born in Hanoi, Vietnam!")
    inside = CHEAP.contains_many(target, [target, "Bananas are yellow and grow in bunches."])
    assert inside.tolist() == [True, False]


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"criteria": ("jaccard",)}, "criteria"),
        ({"ngram_n": 0}, "ngram_n=0"),
        ({"ngram_threshold": 1.5}, "ngram_threshold=1.5"),
        ({"edit_threshold": -0.1}, "edit_threshold=-0.1"),
        ({"cosine_threshold": 2}, "cosine_threshold=2"),
    ],
)
def test_bad_neighbourhoods_are_refused(arguments: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Neighbourhood(**arguments)


# --------------------------------------------------------------------------- the attack


@pytest.mark.parametrize("goal", ["false_negative", "false_positive"])
def test_poisons_stay_outside_the_neighbourhood_and_raise_similarity(tiny: tuple, records: list, goal: str) -> None:
    model, tokenizer = tiny
    target = records[2]
    neighbourhood = Neighbourhood()  # all three criteria, MiniLM included
    poisons = craft_poisons(model, tokenizer, target, goal, budget=2, neighbourhood=neighbourhood, steps=8)
    for poison in poisons:
        assert poison.question == target["question"]
        assert not neighbourhood.contains(target["answer"], poison.answer)
        assert poison.similarity > poison.start_similarity  # the search raised J over its start
        assert poison.history == sorted(poison.history)  # a step is only taken when it raises J
    if goal == "false_negative":  # a confuser keeps none of the target's tokens
        target_ids = tokenizer(" " + target["answer"])["input_ids"]
        assert all(p.swapped == len(target_ids) for p in poisons)
    assert poisons[0].answer != poisons[1].answer  # distinct seeds, distinct poisons


def test_bad_attack_arguments_are_refused(tiny: tuple, records: list) -> None:
    model, tokenizer = tiny
    question, answer = records[0]["question"], records[0]["answer"]
    with pytest.raises(ValueError, match="goal='both'"):
        craft_poison(model, tokenizer, question, answer, "both")
    with pytest.raises(ValueError, match="steps=0"):
        craft_poison(model, tokenizer, question, answer, "false_positive", CHEAP, steps=0)
    with pytest.raises(ValueError, match=r"swap_fraction=1\.5"):
        craft_poison(model, tokenizer, question, answer, "false_positive", CHEAP, swap_fraction=1.5)
    with pytest.raises(ValueError, match="loosen"):  # an edit radius of 1 holds every text of the same length
        craft_poison(model, tokenizer, question, answer, "false_positive", Neighbourhood(("edit",), edit_threshold=1))


def test_a_reference_with_another_tokenizer_is_refused(tiny: tuple, records: list) -> None:
    model, tokenizer = tiny
    other = build_tokenizer(vocab_size=600)
    with pytest.raises(ValueError, match="tokenizer"):
        check_same_tokenizer(tokenizer, other)
    reference = build_tiny_causal_lm(tokenizer=other)
    with pytest.raises(ValueError, match="tokenizer"):
        membership_scores(model, tokenizer, records[:2], reference)


def test_overlapping_splits_warn_with_the_count(tiny: tuple, records: list) -> None:
    model, tokenizer = tiny
    with pytest.warns(UserWarning, match="1 answers"):
        run_poisoning_experiment(
            lambda: (copy.deepcopy(model), tokenizer),
            records[:2],
            records[1:3],
            goals=("false_positive",),
            targets_per_goal=1,
            budget=1,
            neighbourhood=CHEAP,
            attack={"steps": 1},
            training={"epochs": 1},
        )


def test_poisoning_flips_the_decision_on_its_target(tiny: tuple, records: list) -> None:
    """A tiny model trained in the test: the LOSS test calls a member a member and a non-member (another author) a
    non-member, until 12 false-positive poisons for that non-member, none in its neighbourhood, join the training set.
    (False-negative poisons do not flip a member on this from-scratch model: docs/methods/mia_poisoning.md.)"""
    model, tokenizer = tiny
    members, non_members = records[0:18:2], records[18:36:2]  # authors 0-1 are members, 2-3 are not
    population = [*members, *non_members]
    member, target = 0, len(members)
    poisons = craft_poisons(model, tokenizer, non_members[0], "false_positive", 12, CHEAP, steps=6)
    assert not any(CHEAP.contains(non_members[0]["answer"], p.answer) for p in poisons)
    verdicts = {}
    for name, training in (("clean", members), ("poisoned", poisoned_training_set(members, poisons))):
        trained = copy.deepcopy(model)
        fine_tune(trained, tokenizer, training, epochs=12, lr=3e-3, seed=0)
        scores = membership_scores(trained, tokenizer, population)["loss"]
        verdicts[name] = decisions(scores, [member, target])
    assert verdicts["clean"] == [True, False]  # right on both without poisons
    assert verdicts["poisoned"] == [True, True]  # the poisoned non-member now looks like a member
