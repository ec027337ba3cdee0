"""Samplers whose order depends only on (seed, epoch), and a training loader that resumes mid-epoch.

Exact resume needs two things. The order of an epoch must not depend on the global RNG
(:class:`EpochSeededSampler`: a run resumed in epoch e draws epoch e's order again), and the
loader must know how far into that order the checkpoint was taken (:class:`ResumableDataLoader`:
Lightning saves its ``state_dict`` in every checkpoint and, on a mid-epoch restore, hands it back
through ``load_state_dict``; the first epoch after the restore then skips the batches already
trained on). Together a run resumed from any checkpoint, ``hpc_ckpt_*.ckpt`` written on
SIGUSR1 or ``ModelCheckpoint(every_n_train_steps=...)``, trains on the batches an
uninterrupted run would.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import torch
from torch.utils.data import DataLoader, Sampler


class EpochSeededSampler(Sampler[int]):
    """A random order fixed by (seed, epoch); Lightning calls ``set_epoch`` every epoch.

    The order does not depend on the global RNG, so a resumed run draws the order an
    uninterrupted one did; the position within the epoch is :class:`ResumableDataLoader`'s.
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


class PartSampler(EpochSeededSampler):
    """Yields one index per set: the first set once per epoch in the order of
    :class:`EpochSeededSampler`, each other set drawn alongside from fresh permutations of itself,
    cycled when it is the smaller (forget/retain pairs; the parts of a harmful fine-tuning batch)."""

    def __init__(self, sizes: Sequence[int], seed: int) -> None:
        super().__init__(sizes[0], seed)
        self.sizes = list(sizes)

    def orders(self, generator: torch.Generator) -> list[torch.Tensor]:
        """One index tensor per set, each of the first set's length, drawn from ``generator``."""
        orders = [torch.randperm(self.num_samples, generator=generator)]
        for size in self.sizes[1:]:
            cycles = -(-self.num_samples // size)
            orders.append(torch.cat([torch.randperm(size, generator=generator) for _ in range(cycles)]))
        return [order[: self.num_samples] for order in orders]

    def __iter__(self) -> Iterator[tuple[int, ...]]:
        return iter(zip(*(order.tolist() for order in self.orders(self.generator())), strict=True))


class ResumableDataLoader(DataLoader):
    """A DataLoader that remembers how many batches of the current epoch it has handed out.

    ``state_dict()`` is ``{"batches_yielded": n}``; after ``load_state_dict`` the next pass
    drops its first n batches, so training continues with batch n + 1 of the interrupted epoch.
    Lightning calls ``set_epoch`` on the sampler before that pass, so the order is the
    interrupted epoch's (the sampler must be deterministic in (seed, epoch), as
    :class:`EpochSeededSampler` is).

    Why it is correct where it could go wrong:

    - batches are counted where they leave this loader, in the main process, so prefetching by
      workers (``num_workers > 0``) is not counted; Lightning's own one-batch prefetch is off
      for loaders with a length, so the count at a checkpoint is the number of trained batches.
    - under DDP/FSDP Lightning rebuilds this loader around a ``DistributedSamplerWrapper``: the
      count is per rank; every rank hands out the same number of batches, so rank 0's count,
      the one in the checkpoint, is every rank's position.
    - ``__iter__`` is a generator, so the underlying iterator (and any worker prefetch) starts at
      the first ``next``, after Lightning's ``set_epoch``, not when Lightning calls ``iter``.
    - a checkpoint written after the last batch of an epoch records a full epoch: nothing is
      skipped, the next epoch starts from its first batch.

    Lightning 2.6 hands the position back only when its fit loop builds the train loader after
    the checkpoint is restored; a module that reads ``trainer.estimated_stepping_batches`` in
    ``configure_optimizers`` builds it before, and the position is silently dropped
    (Lightning-AI/pytorch-lightning#20550): :class:`~trustlit.CausalLMModule` reads it lazily.

    The skipped batches are loaded and dropped (public DataLoader API only): cheap for the
    in-memory, pre-tokenized datasets of trustlit, a cost of n batches' loading for others.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._batches_yielded = 0
        self._skip_next_pass = 0

    def __iter__(self) -> Iterator[Any]:
        skip, self._skip_next_pass = self._skip_next_pass, 0
        iterator = super().__iter__()
        for _ in range(skip):
            next(iterator)
        self._batches_yielded = skip
        for batch in iterator:
            self._batches_yielded += 1
            yield batch

    def state_dict(self) -> dict[str, int]:
        return {"batches_yielded": self._batches_yielded}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        yielded = int(state_dict.get("batches_yielded", 0))
        # a finished epoch (or a loader that shrank since) resumes at the start of the next one
        self._skip_next_pass = yielded if 0 < yielded < len(self) else 0
