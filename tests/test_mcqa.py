"""MCQADataModule (trustlit.data.mcqa): TOFU's perturbed answers as options A-D."""

from __future__ import annotations

from collections import Counter

import pytest
from helpers import SHARED_DATA

from trustlit.data.mcqa import INSTRUCTION, LETTERS, MCQADataModule, choice_token_ids, mcqa_record
from trustlit.llm.loading import build_tokenizer
from trustlit.llm.prompts import IGNORE_INDEX

TOFU = SHARED_DATA / "tofu"
RECORD = {
    "question": "Where was Ana born?",
    "paraphrased_answer": "Ana was born in Lima.",
    "perturbed_answer": ["Ana was born in Oslo.", "Ana was born in Pune.", "Ana was born in Baku.", "In Rome."],
}


@pytest.fixture(scope="module")
def tokenizer():
    return build_tokenizer()


def test_an_item_holds_the_paraphrase_and_the_first_three_perturbed_answers_once():
    item = mcqa_record(RECORD, seed=0, where="test")
    assert sorted(item["options"]) == sorted([RECORD["paraphrased_answer"], *RECORD["perturbed_answer"][:3]])
    assert item["options"][item["correct"]] == RECORD["paraphrased_answer"]
    assert item["answer"] == LETTERS[item["correct"]]
    lines = item["question"].split("\n")
    assert lines[0] == RECORD["question"] and lines[-1] == INSTRUCTION
    assert lines[1:5] == [f"{letter}. {option}" for letter, option in zip(LETTERS, item["options"], strict=True)]
    assert mcqa_record(RECORD, seed=0, where="test") == item  # the order is a function of the seed


def test_the_seed_shuffles_and_the_correct_letter_is_spread():
    orders = {tuple(mcqa_record(RECORD, seed, "test")["options"]) for seed in range(40)}
    assert len(orders) > 10
    letters = Counter(mcqa_record({**RECORD, "question": f"Q{i}?"}, 0, "test")["answer"] for i in range(400))
    assert set(letters) == set(LETTERS) and min(letters.values()) > 60


def test_records_without_three_perturbed_answers_are_refused_naming_the_record(tokenizer):
    with pytest.raises(ValueError, match=r"q.json, record 3: an MCQA item needs 'paraphrased_answer'"):
        mcqa_record({**RECORD, "perturbed_answer": ["one", "two"]}, 0, "q.json, record 3")
    data = MCQADataModule(source=str(TOFU), eval_splits=["forget01"], prompt_format="chat", max_length=1024)
    data.tokenizer = tokenizer
    with pytest.raises(ValueError, match=r"tofu/forget01, record 1: .* use a \*_perturbed split"):
        data.setup("validate")


def test_tofu_batches_end_the_prompt_before_the_correct_letter(tokenizer):
    data = MCQADataModule(
        source=str(TOFU), eval_splits=["forget10_perturbed"], eval_batch_size=6, prompt_format="chat",
        max_length=1024, max_samples=12,
    )  # fmt: skip
    data.tokenizer = tokenizer
    data.setup("validate")
    batch = next(iter(data.val_dataloader()[0]))
    assert {"input_ids", "attention_mask", "labels", "index", "correct", "choice_ids"} <= set(batch)
    assert batch["choice_ids"].shape == (6, 4) and batch["index"].tolist() == list(range(6))
    first_answer = (batch["labels"] != IGNORE_INDEX).int().argmax(dim=1)
    for row in range(6):
        letter = batch["input_ids"][row, first_answer[row]].item()
        assert letter == batch["choice_ids"][row, batch["correct"][row]].item()
        assert tokenizer.decode([letter]) == batch["answer"][row] == LETTERS[batch["correct"][row]]
        assert batch["question"][row].endswith(INSTRUCTION)


def test_the_letters_must_be_distinct_first_tokens(tokenizer):
    class SplitsTheSpace:  # a tokenizer whose answers " A", " B", ... all start with the same space token
        eos_token = "</s>"
        chat_template = None

        def __call__(self, text: str, add_special_tokens: bool = True) -> dict:
            return {"input_ids": [ord(c) for c in text]}

    assert choice_token_ids(tokenizer, "chat") == [tokenizer.convert_tokens_to_ids(letter) for letter in LETTERS]
    with pytest.raises(ValueError, match=r"start with the token ids \[32, 32, 32, 32\] .* not distinct"):
        choice_token_ids(SplitsTheSpace(), "plain")
