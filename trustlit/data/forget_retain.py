"""Paired forget/retain batches for unlearning.

Each training batch is ``{"forget": batch, "retain": batch}``, two batches in the format of
:func:`trustlit.llm.scoring.collate_qa`; with ``refusals`` set it also holds ``"idk"``: the forget
questions answered by a refusal drawn per pair (IdkDPO's preferred answers).
An epoch is one pass over the forget set in a random order; every forget sample is paired
with a retain sample drawn without replacement from a fresh permutation of the retain set
(cycled when the retain set is the smaller). Both orders depend only on (seed, epoch), and the
loader resumes mid-epoch (:class:`~trustlit.data.samplers.ResumableDataLoader`), so a run resumed
from any checkpoint sees the batches an uninterrupted one would.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import torch
from lightning.pytorch.utilities import rank_zero_warn
from torch.utils.data import DataLoader, Dataset

from trustlit.data.qa import FICTITIOUS, EncodedQA, QACollator, QADataModule
from trustlit.data.refusals import load_refusals
from trustlit.data.samplers import PartSampler, ResumableDataLoader
from trustlit.llm.prompts import encode_qa, resolve_prompt_format

Encoder = Callable[[str, str], dict[str, list[int]]]


class ForgetRetainPairs(Dataset):
    """Indexed by ``(forget_index, retain_index, refusal_index)``, as :class:`PairSampler` yields them.

    ``encode`` (question, answer) -> token ids, with ``refusals``, adds the ``idk`` sample: the
    forget question answered by refusal ``refusal_index``.
    """

    def __init__(
        self, forget: EncodedQA, retain: EncodedQA, refusals: list[str] | None = None, encode: Encoder | None = None
    ) -> None:
        self.forget = forget
        self.retain = retain
        self.refusals = refusals or []
        self.encode = encode

    def __len__(self) -> int:
        return len(self.forget)

    def __getitem__(self, pair: tuple[int, int, int]) -> dict[str, Any]:
        forget_index, retain_index, refusal_index = pair
        forget = self.forget[forget_index]
        item = {"forget": forget, "retain": self.retain[retain_index]}
        if self.refusals:
            refusal = self.refusals[refusal_index]
            item["idk"] = {
                **self.encode(forget["question"], refusal),
                "index": forget_index,
                "question": forget["question"],
                "answer": refusal,
            }
        return item


class PairSampler(PartSampler):
    """Yields ``(forget_index, retain_index, refusal_index)``: forget in a seeded order, retain and
    refusal (when ``num_refusals`` > 0, else 0) drawn per pair."""

    def __init__(self, num_forget: int, num_retain: int, seed: int, num_refusals: int = 0) -> None:
        super().__init__([num_forget, num_retain], seed)
        self.num_refusals = num_refusals

    def __iter__(self) -> Iterator[tuple[int, int, int]]:
        generator = self.generator()
        forget_order, retain_order = self.orders(generator)
        refusal = (
            torch.randint(self.num_refusals, (self.num_samples,), generator=generator)
            if self.num_refusals
            else torch.zeros(self.num_samples, dtype=torch.long)
        )
        return iter(zip(forget_order.tolist(), retain_order.tolist(), refusal.tolist(), strict=True))


class PairCollator:
    """Collates forget, retain (and idk) parts separately; idk batches are tagged with the forget split."""

    def __init__(self, forget: QACollator, retain: QACollator) -> None:
        self.collators = {"forget": forget, "retain": retain, "idk": forget}

    def __call__(self, samples: list[dict[str, Any]]) -> dict[str, Any]:
        return {part: self.collators[part]([s[part] for s in samples]) for part in samples[0]}


class ForgetRetainDataModule(QADataModule):
    """Training batches pair a forget batch with a retain batch; evaluation as in QADataModule.

    Args:
        forget_split: the split to unlearn (TOFU: ``forget01``, ``forget05``, ``forget10``).
        retain_split: the split whose knowledge must survive (TOFU: ``retain99/95/90``).
        refusals: ``default`` or a text file of refusals, one per line (TOFU's ``idontknow.jsonl``),
            to add ``idk`` batches; ``None`` (default) for none.
        Other arguments: see :class:`~trustlit.data.qa.QADataModule`; ``batch_size`` is the
        size of each half.

    A forget set that shares questions with the retain set gets a warning (the two objectives
    then pull the same samples in opposite directions); an empty forget set is an error.
    """

    def __init__(
        self,
        source: str = FICTITIOUS,
        forget_split: str = "forget10",
        retain_split: str = "retain90",
        eval_splits: list[str] | None = None,
        refusals: str | None = None,
        **kwargs: Any,
    ) -> None:
        if forget_split == retain_split:
            raise ValueError(
                f"forget_split and retain_split are both '{forget_split}': unlearning and retaining the same "
                "samples cancel out; give two different splits (TOFU: forget05 with retain95)"
            )
        if eval_splits is None:
            eval_splits = [forget_split, retain_split]
        super().__init__(source=source, train_split=None, eval_splits=eval_splits, **kwargs)
        self.forget_split = forget_split
        self.retain_split = retain_split
        self.refusals = load_refusals(refusals) if refusals is not None else None

    def build_train_dataset(self) -> ForgetRetainPairs:
        forget, retain = self.encode_split(self.forget_split), self.encode_split(self.retain_split)
        if len(forget) == 0:
            raise ValueError(f"the forget split '{self.forget_split}' of {self.source} is empty: nothing to unlearn")
        shared = {s["question"] for s in forget.samples} & {s["question"] for s in retain.samples}
        if shared:
            rank_zero_warn(
                f"{len(shared)} questions of the forget split '{self.forget_split}' are also in the retain split "
                f"'{self.retain_split}' (e.g. {next(iter(shared))!r}): unlearning and retaining them conflict"
            )
        tokenizer = self.resolve_tokenizer()
        prompt_format = resolve_prompt_format(tokenizer, self.prompt_format)

        def encode(question: str, answer: str) -> dict[str, list[int]]:
            return encode_qa(tokenizer, question, answer, prompt_format, self.max_length)

        return ForgetRetainPairs(forget, retain, self.refusals, encode)

    def train_dataloader(self) -> DataLoader:
        pairs = self.train_dataset
        sampler = PairSampler(len(pairs.forget), len(pairs.retain), self.seed, len(pairs.refusals))
        collate = PairCollator(self.collator(self.forget_split), self.collator(self.retain_split))
        return ResumableDataLoader(
            pairs, batch_size=self.batch_size, sampler=sampler, collate_fn=collate, num_workers=self.num_workers
        )
