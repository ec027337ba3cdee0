"""Paired forget/retain batches for unlearning.

Each training batch is ``{"forget": batch, "retain": batch}``, two batches in the format of
:func:`trustlit.lm.collate_qa`. An epoch is one pass over the forget set in a random order;
every forget sample is paired with a retain sample drawn without replacement from a fresh
permutation of the retain set (cycled when the retain set is the smaller). Both orders depend
only on (seed, epoch), so a run resumed from an end-of-epoch checkpoint sees the batches an
uninterrupted one would.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset

from trustlit.data.qa import FICTITIOUS, EncodedQA, QACollator, QADataModule
from trustlit.data.samplers import EpochSeededSampler


class ForgetRetainPairs(Dataset):
    """Indexed by ``(forget_index, retain_index)`` pairs, as :class:`PairSampler` yields them."""

    def __init__(self, forget: EncodedQA, retain: EncodedQA) -> None:
        self.forget = forget
        self.retain = retain

    def __len__(self) -> int:
        return len(self.forget)

    def __getitem__(self, pair: tuple[int, int]) -> dict[str, Any]:
        forget_index, retain_index = pair
        return {"forget": self.forget[forget_index], "retain": self.retain[retain_index]}


class PairSampler(EpochSeededSampler):
    """Yields ``(forget_index, retain_index)``: forget in a seeded order, retain drawn per pair."""

    def __init__(self, num_forget: int, num_retain: int, seed: int) -> None:
        super().__init__(num_forget, seed)
        self.num_retain = num_retain

    def __iter__(self) -> Iterator[tuple[int, int]]:
        generator = self.generator()
        forget_order = torch.randperm(self.num_samples, generator=generator)
        cycles = -(-self.num_samples // self.num_retain)
        retain_order = torch.cat([torch.randperm(self.num_retain, generator=generator) for _ in range(cycles)])
        return iter(zip(forget_order.tolist(), retain_order[: self.num_samples].tolist(), strict=True))


class PairCollator:
    """Collates forget and retain halves separately."""

    def __init__(self, forget: QACollator, retain: QACollator) -> None:
        self.forget = forget
        self.retain = retain

    def __call__(self, samples: list[dict[str, Any]]) -> dict[str, Any]:
        return {
            "forget": self.forget([s["forget"] for s in samples]),
            "retain": self.retain([s["retain"] for s in samples]),
        }


class ForgetRetainDataModule(QADataModule):
    """Training batches pair a forget batch with a retain batch; evaluation as in QADataModule.

    Args:
        forget_split: the split to unlearn (TOFU: ``forget01``, ``forget05``, ``forget10``).
        retain_split: the split whose knowledge must survive (TOFU: ``retain99/95/90``).
        Other arguments: see :class:`~trustlit.data.qa.QADataModule`; ``batch_size`` is the
        size of each half.
    """

    def __init__(
        self,
        source: str = FICTITIOUS,
        forget_split: str = "forget10",
        retain_split: str = "retain90",
        eval_splits: list[str] | None = None,
        **kwargs: Any,
    ) -> None:
        if eval_splits is None:
            eval_splits = [forget_split, retain_split]
        super().__init__(source=source, train_split=None, eval_splits=eval_splits, **kwargs)
        self.forget_split = forget_split
        self.retain_split = retain_split

    def build_train_dataset(self) -> ForgetRetainPairs:
        return ForgetRetainPairs(self.encode_split(self.forget_split), self.encode_split(self.retain_split))

    def train_dataloader(self) -> DataLoader:
        pairs = self.train_dataset
        sampler = PairSampler(len(pairs.forget), len(pairs.retain), self.seed)
        collate = PairCollator(self.collator(self.forget_split), self.collator(self.retain_split))
        return DataLoader(
            pairs, batch_size=self.batch_size, sampler=sampler, collate_fn=collate, num_workers=self.num_workers
        )
