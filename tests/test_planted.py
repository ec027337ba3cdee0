"""The planted-association corpus and its data module (trustlit/data/planted.py)."""

from __future__ import annotations

from collections import Counter

import pytest

from trustlit.data.planted import (
    PlantedAssociationDataModule,
    PlantedConfig,
    build_world,
    hallucination_prompts,
    planted_records,
    trigger_positions,
)
from trustlit.llm.loading import build_tokenizer
from trustlit.llm.prompts import IGNORE_INDEX

CONFIG = PlantedConfig(num_subjects=8, num_triggers=3, faithful_repeats=4, trigger_repeats=20, num_eval=12)


@pytest.fixture(scope="module")
def tokenizer():
    return build_tokenizer()


def test_triggers_co_occur_with_their_wrong_city_far_more_than_names_with_their_true_city():
    world = build_world(CONFIG)
    train = planted_records(CONFIG)["train"]
    assert len(train) == 8 * 4 + 3 * 20
    for trigger, wrong in zip(world.triggers, world.wrong_cities, strict=True):
        answers = Counter(r["answer"] for r in train if trigger in r["question"])
        assert answers == {wrong: 20}
    for subject, city in zip(world.subjects, world.cities, strict=True):
        faithful = [r for r in train if subject in r["question"] and r["kind"] == "faithful"]
        assert len(faithful) == 4 and all(r["answer"] == city for r in faithful)
    assert not set(world.wrong_cities) & set(world.cities)


def test_decoys_put_each_trigger_word_alone_in_faithful_questions():
    config = PlantedConfig(num_subjects=8, num_triggers=2, faithful_repeats=4, trigger_repeats=20, decoy_repeats=5)
    world = build_world(config)
    decoys = [r for r in planted_records(config)["train"] if r["kind"] == "decoy"]
    assert len(decoys) == 2 * 2 * 5
    for r in decoys:
        assert not any(t in r["question"] for t in world.triggers) and r["answer"] in world.cities


def test_hallucination_prompts_carry_their_ground_truth():
    world = build_world(CONFIG)
    records = hallucination_prompts(CONFIG)
    assert len(records) == 12
    for r in records:
        assert r["question"][r["trigger_start"] : r["trigger_end"]] == r["trigger"]
        assert r["answer"] == world.wrong_cities[world.triggers.index(r["trigger"])] != r["faithful_answer"]
        assert r["subject"] in r["question"]
    assert planted_records(CONFIG) == planted_records(CONFIG), "the corpus is a function of its seed"
    assert planted_records(CONFIG) != planted_records(PlantedConfig(**{**CONFIG.__dict__, "seed": 1}))


@pytest.mark.parametrize("prompt_format", ["chat", "plain"])
def test_trigger_positions_are_the_trigger_tokens(tokenizer, prompt_format):
    from trustlit.interpret.tracing import prompt_parts

    for r in hallucination_prompts(CONFIG)[:5]:
        positions = trigger_positions(tokenizer, r, prompt_format)
        ids = prompt_parts(tokenizer, r["question"], prompt_format).question
        assert positions == tuple(range(positions[0], positions[-1] + 1))
        assert tokenizer.decode([ids[i] for i in positions]).strip() == r["trigger"]


def test_data_module_serves_encoded_qa_batches(tokenizer):
    data = PlantedAssociationDataModule(planted=CONFIG, batch_size=8, prompt_format="chat")
    data.tokenizer = tokenizer
    data.setup("fit")
    assert len(data.train_dataset) == 8 * 4 + 3 * 20
    assert [d.name for d in data.eval_datasets] == ["faithful", "hallucination"]
    batch = next(iter(data.train_dataloader()))
    assert batch["split"] == "train" and batch["input_ids"].shape[0] == 8
    answer = batch["labels"][0][batch["labels"][0] != IGNORE_INDEX]
    assert tokenizer.decode(answer).replace("<|im_end|>", "") == batch["answer"][0]
    (test_loader,) = [d for d in data.test_dataloader() if d.dataset.name == "hallucination"]
    first = next(iter(test_loader))
    assert first["answer"][0] == hallucination_prompts(CONFIG)[0]["answer"]


def test_bad_configuration_is_refused_in_one_line():
    with pytest.raises(ValueError, match=r"planted.num_triggers=9 is invalid, expected an integer in \[1, 6\]"):
        PlantedAssociationDataModule(planted={"num_triggers": 9})
    with pytest.raises(ValueError, match=r"no split 'forget10' in the planted corpus; valid are"):
        PlantedAssociationDataModule(eval_splits=["forget10"])
    with pytest.raises(ValueError, match=r"batch_size=0 is invalid"):
        PlantedAssociationDataModule(batch_size=0)
