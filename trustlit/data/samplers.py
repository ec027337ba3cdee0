"""Samplers whose order depends only on (seed, epoch), never on the global RNG."""

from __future__ import annotations

from collections.abc import Iterator

import torch
from torch.utils.data import Sampler


class EpochSeededSampler(Sampler[int]):
    """A random order fixed by (seed, epoch); Lightning calls ``set_epoch`` every epoch.

    The order does not depend on the global RNG, so a run resumed from an end-of-epoch
    checkpoint sees the same batches as an uninterrupted one (a mid-epoch checkpoint replays
    its epoch from the start: the loader keeps no position).
    """

    def __init__(self, num_samples: int, seed: int) -> None:
        self.num_samples = num_samples
        self.seed = seed
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def generator(self) -> torch.Generator:
        return torch.Generator().manual_seed(self.seed * 1_000_003 + self.epoch)

    def __iter__(self) -> Iterator[int]:
        return iter(torch.randperm(self.num_samples, generator=self.generator()).tolist())

    def __len__(self) -> int:
        return self.num_samples
