"""Multiple-choice QA (MCQA) built from TOFU-style records, for layer-wise studies of the decision (the
intrinsic-dimension experiment of Joshi, Bhatt, Modi, NeurIPS 2025, arXiv 2511.20315).

Each record with ``question``, ``paraphrased_answer`` and ``perturbed_answer`` (a list; TOFU's
``*_perturbed`` splits, and every split of the invented-author corpus) becomes one question with four
options: the paraphrased (correct) answer and the first three perturbed (wrong) ones, in an order
shuffled per record by ``random.Random(f"{seed}:{question}")`` (the same question gets the same order
in every split and run). The prompt lists the options as ``A. ...`` to ``D. ...`` and asks for the
letter; the answer is the correct letter alone, so the state at the last prompt token predicts it:

    {question}
    A. {option}
    B. {option}
    C. {option}
    D. {option}
    Answer with the letter (A, B, C or D) of the correct option.

and then the chat template (or ``Question: ... Answer:``), through :func:`trustlit.llm.prompts.encode_qa`.
Batches are :class:`~trustlit.data.qa.QADataModule` batches (``input_ids``, ``attention_mask``,
``labels`` on the letter and the end of the answer, ``index``, ``split``) plus ``correct`` (``[B]``, the
correct option 0..3) and ``choice_ids`` (``[B, 4]``, the token id of each letter as the answer's first
token): ``log p(choice_ids[b, j])`` at the last prompt position is the model's score of option ``j``.

Notes: docs/methods/intrinsic_dimension.md
"""

from __future__ import annotations

import random
from typing import Any

import torch
from transformers import PreTrainedTokenizerBase

from trustlit.data.qa import QACollator, QADataModule, QARecords
from trustlit.llm.prompts import format_qa, resolve_prompt_format

LETTERS = ("A", "B", "C", "D")
INSTRUCTION = "Answer with the letter (A, B, C or D) of the correct option."


def mcqa_record(record: dict[str, Any], seed: int, where: str) -> dict[str, Any]:
    """One MCQA item: ``question`` (the prompt with the options), ``answer`` (the letter), ``correct``, ``options``."""
    wrong = record.get("perturbed_answer")
    right = record.get("paraphrased_answer")
    if not isinstance(right, str) or not isinstance(wrong, list) or len(wrong) < len(LETTERS) - 1:
        raise ValueError(
            f"{where}: an MCQA item needs 'paraphrased_answer' (a string) and 'perturbed_answer' (a list of at "
            f"least {len(LETTERS) - 1}): use a *_perturbed split of TOFU or the fictitious corpus"
        )
    options = [right, *wrong[: len(LETTERS) - 1]]
    order = list(range(len(options)))
    random.Random(f"{seed}:{record['question']}").shuffle(order)
    shuffled = [options[i] for i in order]
    correct = order.index(0)
    lines = [record["question"], *(f"{letter}. {text}" for letter, text in zip(LETTERS, shuffled, strict=True))]
    return {
        "question": "\n".join([*lines, INSTRUCTION]),
        "answer": LETTERS[correct],
        "correct": correct,
        "options": shuffled,
    }


def choice_token_ids(tokenizer: PreTrainedTokenizerBase, prompt_format: str) -> list[int]:
    """The first answer token of each letter; letters that share it (a tokenizer splitting `` A``) are an error."""
    ids = []
    for letter in LETTERS:
        _, answer_text = format_qa(tokenizer, "", letter, prompt_format)
        ids.append(tokenizer(answer_text, add_special_tokens=False)["input_ids"][0])
    if len(set(ids)) != len(ids):
        raise ValueError(
            f"MCQADataModule: the answers {LETTERS} start with the token ids {ids} in prompt_format="
            f"{prompt_format!r}, which are not distinct: the letter must be the answer's first token (try 'chat')"
        )
    return ids


class MCQACollator(QACollator):
    """A QA batch plus ``correct`` (the option index of the answer letter) and ``choice_ids`` ``[B, 4]``."""

    def __init__(self, pad_token_id: int, split: str, choice_ids: list[int]) -> None:
        super().__init__(pad_token_id, split)
        self.choice_ids = choice_ids

    def __call__(self, samples: list[dict[str, Any]]) -> dict[str, Any]:
        batch = super().__call__(samples)
        batch["correct"] = torch.tensor([LETTERS.index(s["answer"]) for s in samples], dtype=torch.long)
        batch["choice_ids"] = torch.tensor([self.choice_ids] * len(samples), dtype=torch.long)
        return batch


class MCQADataModule(QADataModule):
    """TOFU as four-option multiple choice (module docstring), with the arguments of :class:`QADataModule`:

    ``source``: a directory of TOFU JSON Lines files (its ``*_perturbed`` splits: ``forget10_perturbed``,
    ``retain_perturbed``, ...), the hub id ``locuslab/TOFU``, or ``fictitious`` (every split has perturbed
    answers); ``train_split``: what ``fit`` trains on (the answer letter), None when only evaluating;
    ``eval_splits``: one validate/test dataloader each; ``seed``: the option order of every item (and the
    training order); ``max_length``: the prompt holds four answers, raise it past the default 256 for TOFU.
    """

    def load_records(self, split: str) -> QARecords:
        """The split's records as MCQA items (:func:`mcqa_record`)."""
        records = super().load_records(split)
        where = f"{self.source}/{split}"
        return [mcqa_record(record, self.seed, f"{where}, record {i + 1}") for i, record in enumerate(records)]

    def choice_ids(self) -> list[int]:
        """The letters' token ids (:func:`choice_token_ids`) in this DataModule's prompt format."""
        tokenizer = self.resolve_tokenizer()
        return choice_token_ids(tokenizer, resolve_prompt_format(tokenizer, self.prompt_format))

    def collator(self, split: str) -> MCQACollator:
        return MCQACollator(self.resolve_tokenizer().pad_token_id, split, self.choice_ids())
