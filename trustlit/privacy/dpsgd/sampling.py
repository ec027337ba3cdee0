"""Poisson sampling for DP-SGD: the loader that replaces a run's training loader.

Each step takes every sample independently with probability q = 1/len(loader), for len(loader)
steps per epoch, as the accountant assumes. An empty batch still takes a step (noise only), on
every rank.
"""

from __future__ import annotations

from typing import Any

import torch
from opacus.data_loader import DPDataLoader
from opacus.utils.uniform_sampler import DistributedUniformWithReplacementSampler, UniformWithReplacementSampler
from torch.utils.data import DataLoader


class EveryStepDistributedSampler(DistributedUniformWithReplacementSampler):
    """Opacus's distributed Poisson sampler, but yielding empty batches instead of skipping them.

    Every rank must take the same number of steps, or DDP's collectives stop matching.
    """

    def __iter__(self) -> Any:
        order = torch.randperm(self.total_size, generator=torch.Generator().manual_seed(self.shuffle_seed + self.epoch))
        shard = order[self.rank : self.total_size : self.num_replicas]
        for _ in range(self.num_batches):
            mask = torch.rand(self.num_samples, generator=self.generator) < self.sample_rate
            yield shard[mask.nonzero(as_tuple=False).reshape(-1)]


def poisson_loader(loader: DataLoader, distributed: bool, seed: int) -> DataLoader:
    """A loader over ``loader``'s dataset drawing Poisson batches at rate 1/len(loader), len(loader) steps."""
    steps, size = len(loader), len(loader.dataset)
    empty_safe_collate = DPDataLoader.from_data_loader(loader).collate_fn  # collates empty batches too
    sampler = (
        EveryStepDistributedSampler(total_size=size, sample_rate=1 / steps, steps=steps, shuffle_seed=seed)
        if distributed
        else UniformWithReplacementSampler(num_samples=size, sample_rate=1 / steps, steps=steps)
    )
    return DataLoader(
        loader.dataset,
        batch_sampler=sampler,
        collate_fn=empty_safe_collate,
        num_workers=loader.num_workers,
        pin_memory=loader.pin_memory,
    )
