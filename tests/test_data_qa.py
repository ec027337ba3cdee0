"""Tests of the QA data layer: the fictitious corpus, TOFU-format loading, QA and forget/retain DataModules."""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

import datasets
import pytest
import torch
from helpers import SHARED_DATA

from trustlit.data.forget_retain import ForgetRetainDataModule, PairSampler
from trustlit.data.qa import FictitiousConfig, QADataModule, load_qa_split
from trustlit.data.samplers import EpochSeededSampler
from trustlit.fictitious import (
    AWARDS,
    CITIES,
    FACTS_PER_AUTHOR,
    GENRES,
    JOBS,
    fictitious_qa,
    fictitious_split,
    generate_authors,
    split_author_range,
)
from trustlit.llm.loading import build_tokenizer
from trustlit.llm.prompts import IGNORE_INDEX

TOFU_DIR = SHARED_DATA / "tofu"
TOFU_FIELDS = {"question", "answer", "paraphrased_question", "paraphrased_answer", "perturbed_answer"}
SMALL = FictitiousConfig(num_authors=10, seed=0, num_perturbed=3)  # forget10: 1 author (9 records), retain90: 81
BATCH_KEYS = {
    "input_ids",
    "attention_mask",
    "labels",
    "prompt_input_ids",
    "prompt_attention_mask",
    "index",
    "question",
    "answer",
    "split",
}


@pytest.fixture(scope="module")
def tok():
    return build_tokenizer()


def write_jsonl(path: Path, records: list, blank_lines: bool = False) -> Path:
    lines = []
    for record in records:
        lines.append(record if isinstance(record, str) else json.dumps(record))
        if blank_lines:
            lines.append("")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def qa(i: int, prefix: str) -> dict:
    return {"question": f"{prefix} question {i}?", "answer": f"{prefix} answer {i}.", "paraphrased_answer": f"p{i}"}


@pytest.fixture()
def tofu_dir(tmp_path: Path) -> Path:
    """A TOFU-layout directory: ``forget.json`` (3 records, blank lines) and ``retain.jsonl`` (5 records)."""
    directory = tmp_path / "tofu"
    directory.mkdir()
    write_jsonl(directory / "forget.json", [qa(i, "forget") for i in range(3)], blank_lines=True)
    write_jsonl(directory / "retain.jsonl", [qa(i, "retain") for i in range(5)])
    return directory


def author_values(author) -> dict[str, object]:
    return {
        "identity": author.name,
        "birthplace": author.birthplace,
        "birth_year": author.birth_year,
        "genre": author.genre,
        "first_book": author.books[0],
        "second_book": author.books[1],
        "award": author.award,
        "father_job": author.father_job,
        "mother_job": author.mother_job,
    }


# --------------------------------------------------------------------------- fictitious corpus


def test_generate_authors_is_deterministic_and_names_are_distinct():
    authors = generate_authors(40, seed=7)
    assert authors == generate_authors(40, seed=7)
    assert authors != generate_authors(40, seed=8)
    assert [a.author_id for a in authors] == list(range(40))
    assert len({a.name for a in authors}) == 40
    titles = [t for a in authors for t in a.books]
    assert len(set(titles)) == 80
    for a in authors:
        assert a.birthplace in CITIES and a.genre in GENRES and a.award in AWARDS
        assert a.father_job in JOBS and a.mother_job in JOBS
        assert 1920 <= a.birth_year <= 1995


@pytest.mark.parametrize("num_authors", [0, -1, 129])
def test_generate_authors_bounds(num_authors):
    with pytest.raises(ValueError, match=r"\[1, 128\]"):
        generate_authors(num_authors)


def test_fictitious_records_have_tofu_fields_and_the_true_fact():
    num_authors, num_perturbed = 12, 3
    records = fictitious_qa(num_authors, seed=0, num_perturbed=num_perturbed)
    authors = generate_authors(num_authors, seed=0)
    assert len(records) == num_authors * FACTS_PER_AUTHOR
    # author by author, in order (the order of TOFU's full.json)
    assert [r["author_id"] for r in records] == [i for i in range(num_authors) for _ in range(FACTS_PER_AUTHOR)]
    for record in records:
        assert set(record) == TOFU_FIELDS | {"author_id", "fact"}
        author = authors[record["author_id"]]
        value = str(author_values(author)[record["fact"]])
        assert value in record["answer"], record
        assert value in record["paraphrased_answer"], record
        if record["fact"] != "identity":
            assert author.name in record["question"]
        perturbed = record["perturbed_answer"]
        assert isinstance(perturbed, list)
        assert len(perturbed) == num_perturbed
        assert len(set(perturbed)) == num_perturbed
        for wrong in perturbed:
            assert wrong != record["paraphrased_answer"]
            assert value not in wrong, (value, wrong)


def test_perturbed_answers_swap_the_fact_for_a_wrong_value_of_the_same_kind():
    num_authors = 8
    records = fictitious_qa(num_authors, seed=4, num_perturbed=2)
    authors = generate_authors(num_authors, seed=4)
    for record in records:
        author = authors[record["author_id"]]
        others = [a for a in authors if a.author_id != author.author_id]
        pools = {
            "identity": [a.name for a in others],
            "birthplace": CITIES,
            "birth_year": range(1920, 1996),
            "genre": GENRES,
            "first_book": [t for a in others for t in a.books],
            "second_book": [t for a in others for t in a.books],
            "award": AWARDS,
            "father_job": JOBS,
            "mother_job": JOBS,
        }
        true = str(author_values(author)[record["fact"]])
        for wrong in record["perturbed_answer"]:
            # the paraphrase's wording with exactly one wrong value of the same kind in place of the fact
            swaps = [v for v in pools[record["fact"]] if record["paraphrased_answer"].replace(true, str(v)) == wrong]
            assert len(swaps) == 1, (record["fact"], wrong)
            assert str(swaps[0]) != true


def test_fictitious_qa_is_deterministic_per_seed():
    assert fictitious_qa(5, seed=2) == fictitious_qa(5, seed=2)
    assert fictitious_qa(5, seed=2) != fictitious_qa(5, seed=3)


def test_too_many_perturbed_answers_is_an_error():
    # 8 awards: an author's award leaves only 7 wrong ones
    with pytest.raises(ValueError, match="'award' needs 8 wrong values"):
        fictitious_qa(20, num_perturbed=8)


@pytest.mark.parametrize(
    ("num_authors", "split", "expected"),
    [
        (20, "full", (0, 20)),
        (20, "forget10", (18, 20)),
        (20, "retain90", (0, 18)),
        (20, "forget01", (19, 20)),  # at least one author
        (20, "retain99", (0, 19)),
        (20, "forget05", (19, 20)),
        (200, "forget05", (190, 200)),
        (200, "retain95", (0, 190)),
        (3, "forget99", (1, 3)),  # at most num_authors - 1
        (3, "retain01", (0, 1)),
    ],
)
def test_split_author_range_values(num_authors, split, expected):
    assert split_author_range(num_authors, split) == expected


@pytest.mark.parametrize("num_authors", [2, 7, 20, 33, 128])
@pytest.mark.parametrize("percent", [1, 5, 10, 25, 50, 90, 99])
def test_forget_and_complementary_retain_partition_full(num_authors, percent):
    f_start, f_stop = split_author_range(num_authors, f"forget{percent:02d}")
    r_start, r_stop = split_author_range(num_authors, f"retain{100 - percent:02d}")
    assert (r_start, f_stop) == (0, num_authors)
    assert r_stop == f_start
    assert f_stop - f_start >= 1 and r_stop - r_start >= 1


@pytest.mark.parametrize(
    "split", ["forget", "forget0", "forget100", "retain", "retain00", "train", "Forget10", "forget5x"]
)
def test_invalid_split_names(split):
    with pytest.raises(ValueError, match="forgetNN") as info:
        split_author_range(20, split)
    message = str(info.value)
    assert f"'{split}'" in message
    assert "'full'" in message and "retainNN" in message and "1..99" in message


def test_fictitious_split_partitions_full_and_forget_is_the_tail():
    full = fictitious_split("full", num_authors=20, seed=1)
    forget = fictitious_split("forget10", num_authors=20, seed=1)
    retain = fictitious_split("retain90", num_authors=20, seed=1)
    assert retain + forget == full
    assert {r["author_id"] for r in forget} == {18, 19}
    assert {r["author_id"] for r in retain} == set(range(18))
    assert len(forget) == 2 * FACTS_PER_AUTHOR


# --------------------------------------------------------------------------- load_qa_split


def test_load_local_json_and_jsonl(tofu_dir):
    forget = load_qa_split(str(tofu_dir), "forget")
    retain = load_qa_split(str(tofu_dir), "retain")
    assert isinstance(forget, datasets.Dataset)
    assert isinstance(retain, datasets.Dataset)
    assert forget.to_list() == [qa(i, "forget") for i in range(3)]  # blank lines are skipped
    assert retain.to_list() == [qa(i, "retain") for i in range(5)]


def test_load_fictitious_source():
    records = load_qa_split("fictitious", "forget10", SMALL)
    assert isinstance(records, datasets.Dataset)
    assert len(records) == FACTS_PER_AUTHOR
    assert records.to_list() == fictitious_split("forget10", SMALL.num_authors, SMALL.seed, SMALL.num_perturbed)
    with pytest.raises(ValueError, match="unknown split 'bogus'"):
        load_qa_split("fictitious", "bogus", SMALL)


@pytest.mark.parametrize("missing", ["question", "answer"])
def test_line_without_a_field_names_file_and_line(tmp_path, missing):
    records = [qa(0, "a"), qa(1, "a"), qa(2, "a")]
    del records[2][missing]
    path = write_jsonl(tmp_path / "split.json", records)
    with pytest.raises(ValueError, match=f"'{missing}'") as info:
        load_qa_split(str(tmp_path), "split")
    assert f"{path}:3:" in str(info.value)


@pytest.mark.parametrize("bad", ['{"question": "q?", "answer": 3}', '["question", "answer"]', '"text"'])
def test_line_with_non_string_field_or_non_object_names_file_and_line(tmp_path, bad):
    path = write_jsonl(tmp_path / "split.jsonl", [qa(0, "a"), bad])
    with pytest.raises(ValueError, match="missing or non-string") as info:
        load_qa_split(str(tmp_path), "split")
    assert f"{path}:2:" in str(info.value)


def test_invalid_json_names_file_and_line(tmp_path):
    path = write_jsonl(tmp_path / "split.json", [qa(0, "a"), qa(1, "a"), '{"question": "q?", "answer": '])
    with pytest.raises(ValueError, match="not valid JSON") as info:
        load_qa_split(str(tmp_path), "split")
    assert f"{path}:3:" in str(info.value)


@pytest.mark.parametrize("content", ["", "\n\n  \n"])
def test_empty_file_is_an_error(tmp_path, content):
    path = tmp_path / "split.json"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(ValueError, match="empty") as info:
        load_qa_split(str(tmp_path), "split")
    assert str(path) in str(info.value)


def test_missing_split_lists_the_available_ones(tofu_dir):
    with pytest.raises(FileNotFoundError, match="forget99") as info:
        load_qa_split(str(tofu_dir), "forget99")
    message = str(info.value)
    assert "available: ['forget', 'retain']" in message
    assert str(tofu_dir) in message


def test_missing_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(FileNotFoundError, match=re.escape("./does/not/exist")):
        load_qa_split("./does/not/exist", "forget10")
    absent = tmp_path / "absent"
    with pytest.raises(FileNotFoundError, match=re.escape(str(absent))):
        load_qa_split(str(absent), "forget10")


def test_file_instead_of_directory(tofu_dir):
    with pytest.raises(NotADirectoryError, match="directory"):
        load_qa_split(str(tofu_dir / "forget.json"), "forget")


def test_datamodule_checks_the_source_at_construction(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(FileNotFoundError, match=re.escape("./nope")):
        QADataModule(source="./nope")
    with pytest.raises(FileNotFoundError, match=re.escape("./nope")):
        ForgetRetainDataModule(source="./nope")


@pytest.mark.parametrize("key", ["batch_size", "max_length", "max_samples"])
def test_datamodule_rejects_non_positive_sizes(key):
    with pytest.raises(ValueError, match=key):
        QADataModule(**{key: 0})


def test_shared_tofu_forget01():
    assert TOFU_DIR.is_dir(), f"TOFU data expected beside the clone at {TOFU_DIR}"
    records = load_qa_split(str(TOFU_DIR), "forget01")
    assert len(records) == 40
    for record in records:
        assert isinstance(record["question"], str) and record["question"]
        assert isinstance(record["answer"], str) and record["answer"]


# --------------------------------------------------------------------------- QADataModule


def check_batch_masks(batch: dict, pad_token_id: int) -> None:
    """Labels hold IGNORE_INDEX on the prompt and padding and copy every answer token."""
    input_ids, labels, mask = batch["input_ids"], batch["labels"], batch["attention_mask"]
    for i in range(len(input_ids)):
        prompt_len = int(batch["prompt_attention_mask"][i].sum())
        seq_len = int(mask[i].sum())
        assert 0 < prompt_len < seq_len
        assert mask[i, :seq_len].eq(1).all() and mask[i, seq_len:].eq(0).all()
        # the prompt is left-padded in prompt_input_ids and starts the training sequence
        assert torch.equal(input_ids[i, :prompt_len], batch["prompt_input_ids"][i, -prompt_len:])
        assert batch["prompt_attention_mask"][i, -prompt_len:].eq(1).all()
        assert labels[i, :prompt_len].eq(IGNORE_INDEX).all()
        assert torch.equal(labels[i, prompt_len:seq_len], input_ids[i, prompt_len:seq_len])
        assert labels[i, seq_len:].eq(IGNORE_INDEX).all()
        assert input_ids[i, seq_len:].eq(pad_token_id).all()


def test_qa_datamodule_train_batches(tok):
    dm = QADataModule(source="fictitious", train_split="retain90", batch_size=4, fictitious=SMALL, seed=0)
    dm.tokenizer = tok
    dm.setup("fit")
    records = load_qa_split("fictitious", "retain90", SMALL)
    assert len(dm.train_dataset) == len(records) == 81
    loader = dm.train_dataloader()
    assert isinstance(loader.sampler, EpochSeededSampler)
    seen = []
    for batch in loader:
        assert set(batch) == BATCH_KEYS
        assert batch["split"] == "retain90"
        assert batch["index"].dtype == torch.long
        check_batch_masks(batch, tok.pad_token_id)
        for i, index in enumerate(batch["index"].tolist()):
            # index is the sample's position in its split
            assert batch["question"][i] == records[index]["question"]
            assert batch["answer"][i] == records[index]["answer"]
            prompt_len, seq_len = int(batch["prompt_attention_mask"][i].sum()), int(batch["attention_mask"][i].sum())
            assert records[index]["question"] in tok.decode(batch["input_ids"][i, :prompt_len])
            answer = tok.decode(batch["input_ids"][i, prompt_len:seq_len], skip_special_tokens=True)
            assert answer.strip() == records[index]["answer"]
        seen.extend(batch["index"].tolist())
    assert sorted(seen) == list(range(81))
    assert seen != sorted(seen)


def test_qa_datamodule_plain_prompt_masks(tok, tofu_dir):
    dm = QADataModule(source=str(tofu_dir), train_split="retain", eval_splits=[], batch_size=5, prompt_format="plain")
    dm.tokenizer = tok
    dm.setup("fit")
    batch = next(iter(dm.train_dataloader()))
    check_batch_masks(batch, tok.pad_token_id)
    for i in range(5):
        prompt_len = int(batch["prompt_attention_mask"][i].sum())
        assert tok.decode(batch["input_ids"][i, :prompt_len], skip_special_tokens=True).startswith("Question: ")
    assert dm.eval_datasets == []
    assert dm.val_dataloader() == []


def test_qa_datamodule_train_order_follows_the_epoch(tok):
    dm = QADataModule(source="fictitious", train_split="forget10", eval_splits=[], batch_size=4, fictitious=SMALL)
    dm.tokenizer = tok
    dm.setup("fit")

    def order(epoch: int) -> list[int]:
        loader = dm.train_dataloader()
        loader.sampler.set_epoch(epoch)
        return [i for batch in loader for i in batch["index"].tolist()]

    assert order(0) == order(0)
    assert order(0) != order(1)


def test_qa_datamodule_max_samples_caps_every_split(tok):
    dm = QADataModule(
        source="fictitious",
        train_split="retain90",
        eval_splits=["forget10", "full"],
        max_samples=5,
        fictitious=SMALL,
    )
    dm.tokenizer = tok
    dm.setup("fit")
    assert len(dm.train_dataset) == 5
    assert [len(d) for d in dm.eval_datasets] == [5, 5]
    retain = load_qa_split("fictitious", "retain90", SMALL)
    assert [s["question"] for s in dm.train_dataset.samples] == retain["question"][:5]
    # a cap above the split's size keeps the whole split
    big = QADataModule(source="fictitious", train_split="forget10", eval_splits=[], max_samples=50, fictitious=SMALL)
    big.tokenizer = tok
    big.setup("fit")
    assert len(big.train_dataset) == FACTS_PER_AUTHOR


def test_qa_datamodule_eval_dataloaders_one_per_split_in_order(tok):
    splits = ["forget10", "retain90", "full"]
    dm = QADataModule(source="fictitious", eval_splits=splits, batch_size=4, eval_batch_size=16, fictitious=SMALL)
    dm.tokenizer = tok
    dm.setup("validate")
    assert dm.train_dataset is None  # only fit builds the training set
    for loaders in (dm.val_dataloader(), dm.test_dataloader(), dm.predict_dataloader()):
        assert len(loaders) == len(splits)
        for split, loader in zip(splits, loaders, strict=True):
            records = load_qa_split("fictitious", split, SMALL)
            batches = list(loader)
            assert all(b["split"] == split for b in batches)
            assert len(batches[0]["index"]) == min(16, len(records))  # eval_batch_size, not batch_size
            # not shuffled: indices and questions in record order
            assert [i for b in batches for i in b["index"].tolist()] == list(range(len(records)))
            assert [q for b in batches for q in b["question"]] == records["question"]


def test_qa_datamodule_default_eval_splits():
    assert QADataModule().eval_splits == ["retain90", "forget10"]


def test_qa_datamodule_needs_a_tokenizer():
    dm = QADataModule(source="fictitious", fictitious=SMALL)
    with pytest.raises(RuntimeError, match="tokenizer"):
        dm.setup("fit")
    fr = ForgetRetainDataModule(source="fictitious", fictitious=SMALL)
    with pytest.raises(RuntimeError, match="tokenizer"):
        fr.setup("fit")


def test_qa_datamodule_fit_needs_train_split(tok):
    dm = QADataModule(source="fictitious", train_split=None, fictitious=SMALL)
    dm.tokenizer = tok
    with pytest.raises(ValueError, match="train_split"):
        dm.setup("fit")


# --------------------------------------------------------------------------- forget/retain


@pytest.fixture(scope="module")
def forget_retain(tok) -> ForgetRetainDataModule:
    dm = ForgetRetainDataModule(
        source="fictitious", forget_split="forget10", retain_split="retain90", batch_size=4, fictitious=SMALL, seed=0
    )
    dm.tokenizer = tok
    dm.setup("fit")
    return dm


def epoch_pairs(dm: ForgetRetainDataModule, epoch: int) -> list[tuple[int, int]]:
    loader = dm.train_dataloader()
    loader.sampler.set_epoch(epoch)
    pairs = []
    for batch in loader:
        pairs.extend(zip(batch["forget"]["index"].tolist(), batch["retain"]["index"].tolist(), strict=True))
    return pairs


def test_forget_retain_batches(forget_retain, tok):
    forget = load_qa_split("fictitious", "forget10", SMALL)
    retain = load_qa_split("fictitious", "retain90", SMALL)
    assert len(forget) == 9 and len(retain) == 81
    forget_seen, retain_seen = [], []
    batches = list(forget_retain.train_dataloader())
    assert len(batches) == 3  # 9 forget samples in batches of 4
    for batch in batches:
        assert set(batch) == {"forget", "retain"}
        assert set(batch["forget"]) == BATCH_KEYS and set(batch["retain"]) == BATCH_KEYS
        assert batch["forget"]["split"] == "forget10"
        assert batch["retain"]["split"] == "retain90"
        assert len(batch["forget"]["index"]) == len(batch["retain"]["index"]) == batch["retain"]["input_ids"].shape[0]
        for half, records in (("forget", forget), ("retain", retain)):
            check_batch_masks(batch[half], tok.pad_token_id)
            for i, index in enumerate(batch[half]["index"].tolist()):
                assert batch[half]["question"][i] == records[index]["question"]
        forget_seen.extend(batch["forget"]["index"].tolist())
        retain_seen.extend(batch["retain"]["index"].tolist())
    assert sorted(forget_seen) == list(range(9))  # one pass over the forget set
    assert len(set(retain_seen)) == len(retain_seen) == 9
    assert all(0 <= i < 81 for i in retain_seen)


def test_forget_retain_pairs_depend_only_on_seed_and_epoch(forget_retain, tok):
    first = epoch_pairs(forget_retain, 0)
    assert epoch_pairs(forget_retain, 0) == first
    again = ForgetRetainDataModule(source="fictitious", batch_size=4, fictitious=SMALL, seed=0)
    again.tokenizer = tok
    again.setup("fit")
    torch.manual_seed(1234)  # the global RNG plays no part
    assert epoch_pairs(again, 0) == first
    assert epoch_pairs(forget_retain, 1) != first
    other_seed = ForgetRetainDataModule(source="fictitious", batch_size=4, fictitious=SMALL, seed=1)
    other_seed.tokenizer = tok
    other_seed.setup("fit")
    assert epoch_pairs(other_seed, 0) != first


def test_forget_retain_eval_splits(forget_retain):
    assert forget_retain.eval_splits == ["forget10", "retain90"]
    assert [loader.collate_fn.split for loader in forget_retain.val_dataloader()] == ["forget10", "retain90"]
    assert [next(iter(loader))["split"] for loader in forget_retain.val_dataloader()] == ["forget10", "retain90"]
    custom = ForgetRetainDataModule(forget_split="forget05", retain_split="retain95")
    assert custom.eval_splits == ["forget05", "retain95"]
    explicit = ForgetRetainDataModule(eval_splits=["full", "forget05"])
    assert explicit.eval_splits == ["full", "forget05"]


def test_forget_retain_with_local_files(tok, tofu_dir):
    # 3 forget records, 5 retain records, batch of 2: 2 + 1
    dm = ForgetRetainDataModule(source=str(tofu_dir), forget_split="forget", retain_split="retain", batch_size=2)
    dm.tokenizer = tok
    dm.setup("fit")
    batches = list(dm.train_dataloader())
    assert [len(b["forget"]["index"]) for b in batches] == [2, 1]
    assert [len(b["retain"]["index"]) for b in batches] == [2, 1]
    assert all(q.startswith("forget") for b in batches for q in b["forget"]["question"])
    assert all(q.startswith("retain") for b in batches for q in b["retain"]["question"])


def test_pair_sampler_when_retain_is_larger():
    sampler = PairSampler(num_forget=6, num_retain=10, seed=0)
    pairs = list(sampler)
    assert len(sampler) == len(pairs) == 6
    assert sorted(f for f, _, _ in pairs) == list(range(6))
    retain = [r for _, r, _ in pairs]
    assert len(set(retain)) == 6 and all(0 <= r < 10 for r in retain)
    assert {k for _, _, k in pairs} == {0}  # no refusals: the third index is unused


def test_pair_sampler_cycles_a_smaller_retain_set():
    sampler = PairSampler(num_forget=11, num_retain=4, seed=3)
    pairs = list(sampler)
    assert sorted(f for f, _, _ in pairs) == list(range(11))
    counts = Counter(r for _, r, _ in pairs)
    assert set(counts) == set(range(4))
    # two full permutations then 3 of a third: every retain index is used 2 or 3 times
    assert sorted(counts.values()) == [2, 3, 3, 3]
    # each block of 4 consecutive draws is a permutation (drawn without replacement)
    retain = [r for _, r, _ in pairs]
    assert sorted(retain[:4]) == sorted(retain[4:8]) == [0, 1, 2, 3]
    assert len(set(retain[8:])) == 3


def test_pair_sampler_seed_and_epoch():
    a, b = PairSampler(20, 30, seed=5), PairSampler(20, 30, seed=5)
    assert list(a) == list(b)
    assert list(a) != list(PairSampler(20, 30, seed=6))
    first = list(a)
    a.set_epoch(1)
    assert list(a) != first
    b.set_epoch(1)
    assert list(a) == list(b)


def test_pair_sampler_draws_refusals_without_changing_the_pairs():
    plain, with_refusals = PairSampler(20, 30, seed=5), PairSampler(20, 30, seed=5, num_refusals=7)
    assert [p[:2] for p in plain] == [p[:2] for p in with_refusals]
    refusals = [k for _, _, k in with_refusals]
    assert all(0 <= k < 7 for k in refusals) and len(set(refusals)) > 1
