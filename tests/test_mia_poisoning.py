"""Relaxed-membership neighbourhoods and PoisonM, the poisoning attack on membership inference (trustlit.audit)."""

from __future__ import annotations

import copy
import random

import numpy as np
import pytest
import torch

from trustlit.audit.mia_poisoning import (
    activation_cosine,
    advantage,
    answer_activations,
    build_poisoned_data,
    clean_set,
    decisions,
    fine_tune,
    mapping_error,
    membership_scores,
    poison_neighbour,
    poison_non_neighbour,
)
from trustlit.audit.neighbourhood import (
    Neighbourhood,
    edit_distance,
    embedding_cosine,
    in_neighbourhood,
    levenshtein,
    ngrams,
)
from trustlit.fictitious import fictitious_qa
from trustlit.llm.loading import build_tiny_causal_lm
from trustlit.llm.prompts import encode_qa

SEVEN = Neighbourhood()  # the paper's 7-gram neighbourhood (words here)


@pytest.fixture(scope="module")
def tiny() -> tuple:
    torch.set_num_threads(1)
    return build_tiny_causal_lm(seed=0)


@pytest.fixture(scope="module")
def records() -> list[dict]:
    rows = [{"question": r["question"], "answer": r["answer"]} for r in fictitious_qa(num_authors=20)]
    return [r for r in rows if len(r["answer"].split()) >= 7]  # long enough to hold a 7-gram


# --------------------------------------------------------------------------- neighbourhood predicates


def test_ngram_neighbourhood_by_hand() -> None:
    assert ngrams(["a", "b", "c", "d"], 2) == {("a", "b"), ("b", "c"), ("c", "d")}
    assert ngrams(["a", "b"], 3) == set()
    three = Neighbourhood("ngram", k=3)
    target = "the cat sat on the mat"
    assert three.contains(target, "yesterday the cat sat down")  # shares "the cat sat"
    assert not three.contains(target, "the cat ran on a mat")  # 3-grams: none shared
    assert three.measures(target, ["the cat sat on the rug", "x"]).tolist() == [3.0, 0.0]  # counted by hand
    assert SEVEN.contains("short text", "short text")  # a text is its own neighbour, even with no 7-gram
    assert not SEVEN.contains("short text", "short text here")
    assert in_neighbourhood("a b c d e f g h", "z a b c d e f g")  # the default: 7-grams


def test_edit_distance_is_normalised_by_both_lengths() -> None:
    assert levenshtein("kitten", "sitting") == 3  # k->s, e->i, +g
    assert edit_distance("kitten", "sitting") == pytest.approx(3 / 13)
    edit = Neighbourhood("edit")  # l = 0.48
    assert edit.contains("kitten", "sitting")
    assert not edit.contains("abc", "xyz")  # 3 / 6 = 0.5 > 0.48
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


def test_embedding_and_exact_neighbourhoods() -> None:
    target = "The author was born in Paris."
    cosine = embedding_cosine(target, [target, "Bananas are yellow."])
    assert cosine[0] == pytest.approx(1.0, abs=1e-5) and cosine[1] < 0.5
    embedding = Neighbourhood("embedding")  # c = 0.9
    assert embedding.contains(target, "The writer was born in Paris.")
    assert not embedding.contains(target, "Bananas are yellow.")
    exact = Neighbourhood("exact")
    assert exact.contains_many(target, [target, target + " "]).tolist() == [True, False]


def test_membership_is_having_a_neighbour_in_the_training_set() -> None:
    training = ["one two three four five six seven eight", "alpha beta"]
    population = ["zero one two three four five six seven", "one two three", "alpha beta", "gamma"]
    assert SEVEN.members(population, training).tolist() == [True, False, True, False]
    assert Neighbourhood("exact").members(population, training).tolist() == [False, False, True, False]


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"kind": "jaccard"}, "kind='jaccard'"),
        ({"k": 0}, "k=0"),
        ({"edit": 1.5}, "edit=1.5"),
        ({"cosine": 2}, "cosine=2"),
    ],
)
def test_bad_neighbourhoods_are_refused(arguments: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Neighbourhood(**arguments)


# --------------------------------------------------------------------------- the poisons


@pytest.mark.parametrize("kind", ["ngram", "exact", "embedding"])
def test_poisoned_non_neighbours_are_outside_the_neighbourhood(tiny: tuple, records: list, kind: str) -> None:
    model, tokenizer = tiny
    target = records[0]
    neighbourhood = Neighbourhood(kind)
    poisons = [
        poison_non_neighbour(model, tokenizer, target["question"], target["answer"], neighbourhood, seed=s)
        for s in range(2)
    ]
    for poison in poisons:
        assert poison.question == target["question"] and poison.kind == "non_neighbour"
        assert not neighbourhood.contains(target["answer"], poison.answer)
        assert poison.steps == len(poison.history) >= 1
    if kind == "exact":  # Appendix C: a single swap leaves an exact-match neighbourhood
        assert [p.steps for p in poisons] == [1, 1]
    assert poisons[0].answer != poisons[1].answer  # distinct seeds, distinct random positions


def test_each_swap_takes_the_token_of_highest_activation_cosine(tiny: tuple, records: list) -> None:
    """Over the whole vocabulary (top_k=None), the n-gram loss is -cos(f(p), f(x_t)): the one swap of an exact-match
    poison must be the best single swap at its position, found again here by brute force."""
    model, tokenizer = tiny
    target = records[1]
    poison = poison_non_neighbour(
        model, tokenizer, target["question"], target["answer"], Neighbourhood("exact"), top_k=None, seed=3
    )
    encoded = encode_qa(tokenizer, target["question"], target["answer"], "plain", max_length=10**6)
    row = torch.tensor(encoded["input_ids"])
    span = slice(len(encoded["prompt_ids"]), len(row) - 1)  # the answer without its end token
    position = span.start + random.Random(3).randrange(span.stop - span.start)  # the search's first draw
    with torch.no_grad():
        anchor = answer_activations(model, model.get_input_embeddings()(row[None]), span)[0]
    rows = row[None].repeat(model.config.vocab_size, 1)
    rows[:, position] = torch.arange(model.config.vocab_size)
    rows = rows[[t not in tokenizer.all_special_ids and t != int(row[position]) for t in range(len(rows))]]
    best = activation_cosine(model, rows, span, anchor).max()
    assert poison.similarity == pytest.approx(float(best), abs=1e-5)


def test_poisoned_neighbours_inject_the_shortest_kgram(records: list) -> None:
    target, auxiliary = records[0]["answer"], records[40]
    poison = poison_neighbour(target, auxiliary, SEVEN, seed=0)
    assert SEVEN.contains(target, poison.answer) and poison.question == auxiliary["question"]
    words = target.split()
    shortest = min((words[i : i + 7] for i in range(len(words) - 6)), key=lambda g: len(" ".join(g)))
    assert " ".join(shortest) in poison.answer
    with pytest.raises(ValueError, match="exact"):
        poison_neighbour(target, auxiliary, Neighbourhood("exact"))
    with pytest.raises(ValueError, match="already a neighbour"):
        poison_neighbour(target, {"question": "q", "answer": target}, SEVEN)
    edit = Neighbourhood("edit")
    far = {"question": "q", "answer": "x" * (2 * len(target))}
    assert edit.contains(target, poison_neighbour(target, far, edit, max_steps=3000).answer)


def test_the_clean_set_is_background_then_members_with_question_and_answer_only() -> None:
    background = [{"question": "q1", "answer": "a1", "author": "x"}, {"question": "q2", "answer": "a2"}]
    members = [{"question": "q3", "answer": "a3", "paraphrased_answer": "p3"}]
    assert clean_set(background, members) == [
        {"question": "q1", "answer": "a1"},
        {"question": "q2", "answer": "a2"},
        {"question": "q3", "answer": "a3"},
    ]
    assert background[0]["author"] == "x"  # the inputs are not modified


def test_the_poisoned_dataset_substitutes_and_keeps_every_label(tiny: tuple, records: list) -> None:
    model, tokenizer = tiny
    members, auxiliary, non_members, background = records[:3], records[3:6], records[-3:], records[10:50]
    data = build_poisoned_data(
        model, tokenizer, background, members, non_members, auxiliary, SEVEN, non_neighbour_budget=4
    )
    assert len(data.poisoned) == len(data.clean) == len(data.ideal) == len(background) + len(members)
    assert data.clean == clean_set(background, members)  # the one rule the benchmark also uses
    population = [r["answer"] for r in [*members, *non_members]]
    labels = {
        name: SEVEN.members(population, [r["answer"] for r in getattr(data, name)]) for name in ("clean", "poisoned")
    }
    assert labels["clean"].tolist() == labels["poisoned"].tolist()  # membership-invariant substitutions
    for index in data.false_positives:
        target = population[index]
        mine = [p for p in data.poisons if p.target == target]
        assert len(mine) == 4 and not SEVEN.contains_many(target, [p.answer for p in mine]).any()
        assert sum(r["answer"] == target for r in data.ideal) == 4  # x_sample = x_t, once per poison
    for index in data.false_negatives:
        assert population[index] not in [r["answer"] for r in data.poisoned]  # the member's own copy is gone
    with pytest.raises(ValueError, match="non_neighbour_budget"):
        build_poisoned_data(
            model, tokenizer, background, members, non_members, auxiliary, SEVEN, non_neighbour_budget=40
        )


def test_advantage_and_mapping_error_by_hand() -> None:
    scores, labels = torch.tensor([3.0, 1.0, 0.0, 2.0]), torch.tensor([True, True, False, False])
    assert advantage(scores, labels) == pytest.approx(2.0 - 1.0)
    assert mapping_error(torch.tensor([1.0, 2.0, 3.0]), torch.tensor([1.5, 2.0, 1.0]), [0, 2]) == pytest.approx(1.25)
    assert mapping_error(scores, scores, []) == 0.0


def test_poisoning_flips_the_decision_both_ways(tiny: tuple, records: list) -> None:
    """A tiny model trained in the test: LOSS calls a member a member and a non-member a non-member; after one
    poisoned neighbour replaces the member (b1 = 1) and ten poisoned non-neighbours replace background records
    (b2 = 10), neither label changes, yet both decisions flip."""
    model, tokenizer = tiny
    members, auxiliary, background, non_members = records[:4], records[4:8], records[8:48], records[-4:]
    data = build_poisoned_data(model, tokenizer, background, members, non_members, auxiliary, SEVEN)
    member, target = 0, len(members)
    assert member in data.false_negatives and target in data.false_positives
    population = [*members, *non_members]
    verdicts = {}
    for name in ("clean", "poisoned"):
        trained = copy.deepcopy(model)
        fine_tune(trained, tokenizer, getattr(data, name), epochs=8, lr=3e-3, seed=0)
        verdicts[name] = decisions(membership_scores(trained, tokenizer, population)["loss"], [member, target])
    assert verdicts["clean"] == [True, False]
    assert verdicts["poisoned"] == [False, True]


def test_the_attack_runs_on_a_lora_model(tiny: tuple, records: list) -> None:
    """The benchmark's SmolLM2 set-up on the tiny Llama: a PeftModel (adapters at zero) has the plain model's
    activations, its token swaps get gradients through the frozen embeddings, and fine-tuning moves only the
    adapters, so the base stays a valid reference."""
    from trustlit.llm.loading import apply_lora

    model, tokenizer = tiny
    lora = apply_lora(copy.deepcopy(model), {"r": 4, "lora_alpha": 8, "target_modules": ["q_proj", "v_proj"]})
    target = records[2]
    encoded = encode_qa(tokenizer, target["question"], target["answer"], "plain", max_length=10**6)
    row = torch.tensor(encoded["input_ids"])[None]
    span = slice(len(encoded["prompt_ids"]), row.shape[1] - 1)
    with torch.no_grad():
        plain = answer_activations(model, model.get_input_embeddings()(row), span)
        wrapped = answer_activations(lora, lora.get_input_embeddings()(row), span)
    torch.testing.assert_close(wrapped, plain)
    poison = poison_non_neighbour(lora, tokenizer, target["question"], target["answer"], SEVEN, top_k=8, seed=1)
    assert not SEVEN.contains(target["answer"], poison.answer)
    frozen = {n: p.detach().clone() for n, p in lora.named_parameters() if not p.requires_grad}
    tuned = copy.deepcopy(lora)
    fine_tune(tuned, tokenizer, records[:8], lr=1e-2, batch_size=4)
    after = dict(tuned.named_parameters())
    assert all(torch.equal(after[n], p) for n, p in frozen.items())
    assert any(not torch.equal(after[n], p) for n, p in lora.named_parameters() if p.requires_grad)
