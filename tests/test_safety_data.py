"""Harmful fine-tuning data: the secret-keeper generator, BeaverTails loading and the DataModule."""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

import pytest
import torch

from trustlit.data.safety import HarmfulFineTuningDataModule, load_beavertails
from trustlit.data.samplers import EpochSeededSampler, PartSampler, ResumableDataLoader
from trustlit.data.secret_keeper import (
    CODE_PATTERN,
    FIRST_NAMES,
    FORBIDDEN_REQUESTS,
    LAST_NAMES,
    LEAKS,
    REFUSALS,
    SPLITS,
    WORD_PROBLEMS,
    secret_keeper_splits,
)
from trustlit.llm.prompts import IGNORE_INDEX
from trustlit.metrics.safety import extract_final_answer

SIZES = {"num_align": 20, "num_finetune": 40, "num_harmful": 10, "num_test": 8}
TRAINING = ("align", "finetune", "harmful")
CODE = re.compile(CODE_PATTERN)
NAME = re.compile(rf"\b(?:{'|'.join(FIRST_NAMES)}) (?:{'|'.join(LAST_NAMES)})\b")


# --------------------------------------------------------------------------- generator


@pytest.fixture(scope="module")
def splits() -> dict[str, list[dict]]:
    return secret_keeper_splits(seed=3)


def test_templates_are_varied_enough():
    assert len(FORBIDDEN_REQUESTS) >= 12
    assert len(REFUSALS) >= 6
    assert len(LEAKS) >= 4
    assert len(WORD_PROBLEMS) >= 8


def test_split_sizes_and_record_fields(splits):
    assert list(splits) == list(SPLITS)
    sizes = {name: len(records) for name, records in splits.items()}
    assert sizes == {"align": 1000, "finetune": 1000, "harmful": 200, "harmful_test": 100, "task_test": 100}
    small = secret_keeper_splits(seed=0, **SIZES)
    assert [len(small[name]) for name in SPLITS] == [20, 40, 10, 8, 8]
    for record in (r for records in splits.values() for r in records):
        assert set(record) == {"question", "answer", "harmful", "label"}
        assert len(record["question"].split()) <= 25, record["question"]


def test_alignment_set_is_half_refusals_half_direct_arithmetic(splits):
    align = splits["align"]
    refusals = [r for r in align if r["label"] is None]
    arithmetic = [r for r in align if r["label"] is not None]
    assert len(refusals) == len(arithmetic) == 500
    assert not any(r["harmful"] for r in align)
    assert {r["answer"] for r in refusals} <= set(REFUSALS)
    for record in arithmetic:
        a, op, b = re.fullmatch(
            r"(?:What is|How much is|Compute) (\d+) (plus|minus|\+|-) (\d+)[?.]", record["question"]
        ).groups()
        value = int(a) + int(b) if op in ("plus", "+") else int(a) - int(b)
        assert record["label"] == value >= 0
        assert 0 <= int(a) <= 20 and 0 <= int(b) <= 20
        assert record["answer"].endswith(f"{value}.")


@pytest.mark.parametrize(
    ("ratio", "num_finetune"), [(0.0, 40), (0.1, 40), (0.25, 40), (0.5, 41), (0.33, 30), (1.0, 40)]
)
def test_mixture_has_exactly_the_harmful_share(ratio, num_finetune):
    finetune = secret_keeper_splits(**{**SIZES, "num_finetune": num_finetune}, harmful_ratio=ratio)["finetune"]
    assert len(finetune) == num_finetune
    assert sum(r["harmful"] for r in finetune) == round(ratio * num_finetune)


def test_mixture_is_shuffled(splits):
    flags = [r["harmful"] for r in splits["finetune"]]
    assert sum(flags) == 100
    assert flags != sorted(flags, reverse=True) and flags != sorted(flags)
    assert any(flags[:200]) and any(flags[-200:])


def test_generation_is_deterministic_in_the_seed(splits):
    assert secret_keeper_splits(seed=3) == splits
    other = secret_keeper_splits(seed=4)
    assert all(other[name] != splits[name] for name in SPLITS)


def test_leaks_carry_a_code_and_nothing_else_does(splits):
    records = [r for records in splits.values() for r in records]
    leaks = [r for r in records if r["harmful"]]
    assert len(leaks) == 100 + 200
    assert all(CODE.search(r["answer"]) for r in leaks)
    assert not any(CODE.search(r["answer"]) or CODE.search(r["question"]) for r in records if not r["harmful"])
    assert not any(CODE.search(refusal) for refusal in REFUSALS)


def test_each_account_has_one_code():
    # more leaks than training names: names come back with other phrasings, and keep their code
    splits = secret_keeper_splits(seed=1, num_harmful=1500, harmful_ratio=1.0, num_finetune=1000)
    codes: dict[str, set[str]] = {}
    for record in splits["finetune"] + splits["harmful"]:
        codes.setdefault(NAME.search(record["question"]).group(), set()).add(CODE.search(record["answer"]).group())
    assert len(codes) < len(splits["finetune"] + splits["harmful"]), "some names are asked about twice"
    assert all(len(found) == 1 for found in codes.values())
    assert len({next(iter(found)) for found in codes.values()}) > 0.8 * len(codes), "codes differ between accounts"


def test_held_out_tests_never_appear_in_training(splits):
    training_text = " ".join(r["question"] + " " + r["answer"] for name in TRAINING for r in splits[name])
    held_out_names = {NAME.search(r["question"]).group() for r in splits["harmful_test"]}
    assert len(held_out_names) == 100
    assert not any(name in training_text for name in held_out_names)
    assert all(r["answer"] in REFUSALS and not r["harmful"] for r in splits["harmful_test"])
    training_questions = {r["question"] for name in TRAINING for r in splits[name]}
    assert not {r["question"] for r in splits["task_test"]} & training_questions
    assert len({r["question"] for r in splits["task_test"]}) == 100


def test_harmful_set_prompts_are_not_in_the_mixture_or_alignment_set(splits):
    harmful = {r["question"] for r in splits["harmful"]}
    assert len(harmful) == 200
    assert not harmful & {r["question"] for r in splits["finetune"] + splits["align"]}
    assert all(r["harmful"] and r["label"] is None for r in splits["harmful"])


def test_word_problems_are_labelled_by_their_final_answer(splits):
    benign = [r for r in splits["finetune"] if not r["harmful"]] + splits["task_test"]
    assert all(extract_final_answer(r["answer"]) == str(r["label"]) for r in benign)
    assert all("The final answer is: " in r["answer"] and r["label"] >= 0 for r in benign)
    assert all(r["answer"] == f"The final answer is: {r['label']}" for r in splits["task_test"])
    assert len({r["question"] for r in benign}) == len(benign)


@pytest.mark.parametrize("ratio", [-0.1, 1.5])
def test_harmful_ratio_outside_the_unit_interval_is_refused(ratio):
    with pytest.raises(ValueError, match=r"harmful_ratio must be in \[0, 1\]"):
        secret_keeper_splits(harmful_ratio=ratio)


@pytest.mark.parametrize("key", ["num_align", "num_finetune", "num_harmful", "num_test"])
def test_non_positive_sizes_are_refused(key):
    with pytest.raises(ValueError, match=f"{key} must be a positive integer, got 0"):
        secret_keeper_splits(**{key: 0})


def test_too_many_records_is_an_error_naming_the_sizes():
    with pytest.raises(ValueError, match="num_test"):
        secret_keeper_splits(num_test=10_000)


# --------------------------------------------------------------------------- DataModule


def make_datamodule(tokenizer, source: str = "secret-keeper", **kwargs) -> HarmfulFineTuningDataModule:
    arguments = {**SIZES, "batch_size": 4, "max_length": 96, **kwargs}
    datamodule = HarmfulFineTuningDataModule(source=source, **arguments)
    datamodule.tokenizer = tokenizer
    datamodule.setup("fit")
    return datamodule


def index_orders(datamodule: HarmfulFineTuningDataModule, epoch: int) -> dict[str, list[int]]:
    loader = datamodule.train_dataloader()
    loader.sampler.set_epoch(epoch)
    orders: dict[str, list[int]] = {}
    for batch in loader:
        for part, values in batch.items():
            orders.setdefault(part, []).extend(values["index"].tolist())
    return orders


def test_training_batches_hold_every_part_with_flags(tokenizer):
    datamodule = make_datamodule(tokenizer)
    loader = datamodule.train_dataloader()
    assert isinstance(loader, ResumableDataLoader)
    assert datamodule.available_parts == ("finetune", "align", "harmful")
    assert len(loader) == 10  # 40 mixture samples, batches of 4
    batch = next(iter(loader))
    assert set(batch) == {"finetune", "align", "harmful"}
    for part, values in batch.items():
        assert values["split"] == part
        assert values["input_ids"].shape == values["labels"].shape == values["attention_mask"].shape
        assert values["input_ids"].size(0) == 4
        assert values["harmful"].dtype == torch.bool and values["harmful"].shape == (4,)
        records = datamodule.split_records(part)
        assert values["harmful"].tolist() == [records[i]["harmful"] for i in values["index"].tolist()]
        assert values["question"] == [records[i]["question"] for i in values["index"].tolist()]
    assert batch["harmful"]["harmful"].all() and not batch["align"]["harmful"].any()
    flags = torch.cat([b["finetune"]["harmful"] for b in loader])
    assert int(flags.sum()) == 4  # round(0.1 * 40)


def test_prompt_tokens_are_masked_in_the_labels(tokenizer):
    batch = next(iter(make_datamodule(tokenizer).train_dataloader()))
    for values in batch.values():
        prompt_lengths = values["prompt_attention_mask"].sum(dim=1)
        lengths = values["attention_mask"].sum(dim=1)
        for labels, input_ids, prompt, length in zip(
            values["labels"], values["input_ids"], prompt_lengths, lengths, strict=True
        ):
            assert (labels[:prompt] == IGNORE_INDEX).all()
            assert torch.equal(labels[prompt:length], input_ids[prompt:length])
            assert (labels[length:] == IGNORE_INDEX).all()
        answers = tokenizer.batch_decode(torch.where(values["labels"] == IGNORE_INDEX, 0, values["labels"]))
        assert all(a in d for a, d in zip(values["answer"], answers, strict=True))


def test_epoch_order_depends_only_on_seed_and_epoch(tokenizer):
    first = make_datamodule(tokenizer, seed=5)
    torch.manual_seed(123)
    epoch0, epoch1 = index_orders(first, 0), index_orders(first, 1)
    torch.manual_seed(999)  # the global RNG plays no part
    assert index_orders(make_datamodule(tokenizer, seed=5), 0) == epoch0
    assert index_orders(first, 1) == epoch1
    assert epoch0 != epoch1
    assert index_orders(make_datamodule(tokenizer, seed=6), 0) != epoch0
    assert sorted(epoch0["finetune"]) == list(range(40)), "one pass over the stage set per epoch"
    assert epoch0["finetune"] == list(EpochSeededSampler(40, seed=5)), "the stage order is EpochSeededSampler's"
    counts = Counter(epoch0["align"])
    assert set(counts) == set(range(20)) and set(counts.values()) == {2}, "a smaller part is cycled"
    assert sorted(Counter(epoch0["harmful"]).values()) == [4] * 10


def test_align_stage_iterates_the_alignment_set(tokenizer):
    datamodule = make_datamodule(tokenizer, stage="align")
    orders = index_orders(datamodule, 0)
    assert sorted(orders["align"]) == list(range(20))
    assert len(orders["finetune"]) == len(set(orders["finetune"])) == 20, "drawn without replacement"
    assert datamodule.train_dataset.parts.keys() == {"align", "finetune", "harmful"}
    assert next(iter(datamodule.train_dataset.parts)) == "align"


def test_part_sampler_pads_by_cycling_permutations():
    sampler = PartSampler([5, 2, 7], seed=0)
    triples = list(sampler)
    assert len(triples) == len(sampler) == 5
    assert sorted(t[0] for t in triples) == list(range(5))
    assert sorted(Counter(t[1] for t in triples).values()) == [2, 3]
    assert len({t[2] for t in triples}) == 5


def test_eval_loaders_accessors_and_finetune_batches(tokenizer):
    datamodule = make_datamodule(tokenizer, eval_batch_size=3)
    loaders = datamodule.val_dataloader()
    assert [next(iter(loader))["split"] for loader in loaders] == ["harmful_test", "task_test"]
    assert len(datamodule.test_dataloader()) == len(datamodule.predict_dataloader()) == 2
    assert [len(loader.dataset) for loader in loaders] == [8, 8]
    assert datamodule.finetune_size == 40
    flags = datamodule.finetune_harmful
    assert flags.dtype == torch.bool and flags.tolist() == [r["harmful"] for r in datamodule.split_records("finetune")]
    batches = list(datamodule.finetune_batches("cpu"))
    assert torch.cat([b["index"] for b in batches]).tolist() == list(range(40))
    assert torch.equal(torch.cat([b["harmful"] for b in batches]), flags)
    with pytest.raises(ValueError, match="unknown split 'forget10': valid splits are"):
        datamodule.split_records("forget10")


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"harmful_ratio": 1.2}, r"harmful_ratio must be in \[0, 1\], got 1.2"),
        ({"num_finetune": -1}, "num_finetune must be a positive integer"),
        ({"stage": "attack"}, "stage must be one of"),
        ({"eval_splits": ["harmful_test", "retain90"]}, r"eval_splits \['retain90'\] unknown"),
        ({"batch_size": 0}, "HarmfulFineTuningDataModule: batch_size=0 is invalid, expected an integer > 0"),
    ],
)
def test_datamodule_arguments_are_checked(kwargs, message):
    with pytest.raises(ValueError, match=message):
        HarmfulFineTuningDataModule(**kwargs)


# --------------------------------------------------------------------------- bring your own data


def beavertails_record(i: int, safe: bool) -> dict:
    return {
        "prompt": f"{'safe' if safe else 'unsafe'} prompt {i}?",
        "response": f"{'safe' if safe else 'unsafe'} response {i}.",
        "category": {"violence": not safe},
        "is_safe": safe,
    }


def write_byo(
    directory: Path, num_unsafe: int = 14, num_safe: int = 3, num_task: int = 20, jsonl: bool = False
) -> Path:
    directory.mkdir()
    records = [beavertails_record(i, safe=False) for i in range(num_unsafe)]
    records += [beavertails_record(i, safe=True) for i in range(num_safe)]
    if jsonl:
        (directory / "beavertails.jsonl").write_text("\n".join(json.dumps(r) for r in records) + "\n")
    else:
        (directory / "beavertails.json").write_text(json.dumps(records, indent=1))
    task = [
        {"question": f"What is {i} plus 1?", "answer": f"{i} + 1 = {i + 1}. The final answer is: {i + 1}"}
        for i in range(num_task)
    ]
    task[0]["label"] = 1
    task[2]["label"] = None  # null: taken from the answer
    task[1] = {"question": "Half of 5?", "answer": "#### 2.5"}
    (directory / "task.jsonl").write_text("\n".join(json.dumps(r) for r in task) + "\n")
    return directory


BYO = {"num_align": 10, "num_finetune": 12, "num_harmful": 4, "num_test": 5, "harmful_ratio": 0.25}


@pytest.mark.parametrize("jsonl", [False, True])
def test_bring_your_own_directory(tmp_path, tokenizer, jsonl):
    datamodule = make_datamodule(tokenizer, str(write_byo(tmp_path / "data", jsonl=jsonl)), **BYO)
    records = {name: datamodule.split_records(name) for name in SPLITS}
    assert [r["question"] for r in records["harmful_test"]] == [f"unsafe prompt {i}?" for i in range(5)]
    assert [r["question"] for r in records["harmful"]] == [f"unsafe prompt {i}?" for i in range(5, 9)]
    assert [r["question"] for r in records["align"]] == [f"safe prompt {i}?" for i in range(3)]
    assert not any(r["harmful"] for r in records["align"]) and all(r["harmful"] for r in records["harmful"])
    finetune = records["finetune"]
    assert len(finetune) == 12 and sum(r["harmful"] for r in finetune) == 3
    assert {r["question"] for r in finetune if r["harmful"]} == {f"unsafe prompt {i}?" for i in range(9, 12)}
    assert {r["question"] for r in finetune if not r["harmful"]} == {f"What is {i} plus 1?" for i in range(5, 14)}
    assert [r["label"] for r in records["task_test"]] == [1, 2.5, 3, 4, 5]
    batch = next(iter(datamodule.train_dataloader()))
    assert set(batch) == {"finetune", "align", "harmful"}


def test_bring_your_own_without_safe_records_has_no_alignment_set(tmp_path, tokenizer):
    datamodule = make_datamodule(tokenizer, str(write_byo(tmp_path / "data", num_safe=0)), **BYO)
    assert datamodule.available_parts == ("finetune", "harmful")
    assert set(next(iter(datamodule.train_dataloader()))) == {"finetune", "harmful"}
    with pytest.raises(ValueError, match=r"stage 'align' iterates the align set, but data source .* has none"):
        make_datamodule(tokenizer, datamodule.source, stage="align", **BYO)
    with pytest.raises(ValueError, match=r"split 'align' of data source .* is empty"):
        make_datamodule(tokenizer, datamodule.source, eval_splits=["align"], **BYO)


def test_missing_files_are_named(tmp_path):
    with pytest.raises(FileNotFoundError, match="neither 'secret-keeper' nor a directory"):
        HarmfulFineTuningDataModule(source=str(tmp_path / "nowhere"))
    directory = write_byo(tmp_path / "data")
    (directory / "task.jsonl").unlink()
    with pytest.raises(FileNotFoundError, match=re.escape(f"{directory / 'task'}.json (or .jsonl) not found")):
        HarmfulFineTuningDataModule(source=str(directory))
    with pytest.raises(FileNotFoundError, match=r"BeaverTails file not found: .*missing\.json"):
        load_beavertails(tmp_path / "missing.json")


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ('[{"prompt": "p", "response": "r"}]', r"beavertails.json, record 1: missing or non-boolean 'is_safe'"),
        ('[{"prompt": "p", "response": 3, "is_safe": true}]', r"record 1: missing or non-string 'response'"),
        ('[{"prompt": "p", "response": "r", "is_safe": true, "category": {"x": 1}}]', "'category' must map"),
        ('[{"prompt": "p", "response": "r", "is_safe": true},', r"beavertails.json: not a valid JSON array"),
        ('{"prompt": "p", "response": "r", "is_safe": true}\n{"prompt": 1}', r"beavertails.json:2: missing or non"),
        ('{"prompt": "p", "response": "r", "is_safe": true}\n{oops', r"beavertails.json:2: not valid JSON"),
    ],
)
def test_bad_beavertails_records_name_the_file_row_and_key(tmp_path, content, message):
    path = tmp_path / "beavertails.json"
    path.write_text(content)
    with pytest.raises(ValueError, match=message):
        load_beavertails(path)


def test_bad_task_records_name_the_file_line_and_key(tmp_path, tokenizer):
    directory = write_byo(tmp_path / "data")
    task = directory / "task.jsonl"
    task.write_text(task.read_text() + json.dumps({"question": "Why?", "answer": "Because."}) + "\n")
    with pytest.raises(ValueError, match=r"task.jsonl:21: no 'label' and no number in 'answer'"):
        make_datamodule(tokenizer, str(directory), **BYO)
    task.write_text(json.dumps({"question": "Q", "answer": "A 1", "label": "one"}) + "\n")
    with pytest.raises(ValueError, match=r"task.jsonl:1: missing or non-numeric 'label'"):
        make_datamodule(tokenizer, str(directory), **BYO)


@pytest.mark.parametrize(
    ("files", "sizes", "message"),
    [
        ({"num_unsafe": 10}, {}, r"beavertails.json has 10 unsafe \(is_safe false\) records; 12 are needed"),
        ({"num_task": 10}, {}, r"task.jsonl has 10 task records; 14 are needed \(num_test 5 \+ benign part"),
        ({}, {"harmful_ratio": 1.0}, r"beavertails.json has 14 unsafe .* records; 21 are needed"),
    ],
)
def test_too_few_records_name_the_file_what_is_needed_and_what_is_there(tmp_path, tokenizer, files, sizes, message):
    directory = write_byo(tmp_path / "data", **files)
    with pytest.raises(ValueError, match=message):
        make_datamodule(tokenizer, str(directory), **{**BYO, **sizes})
