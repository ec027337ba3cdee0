"""Labelled 1-D distributions for the targeted-poisoning learners (:mod:`trustlit.attacks.targeted_poisoning`).

Each is a finite-domain distribution D (points, marginal weights, P(y = 1 | x)), so that the learners' excess error
is exact in the target (x, y) ~ D:

- ``noisy_blocks``: ``points`` grid points 0..N-1 with a uniform marginal; P(y = 1 | x) = 1 - ``noise`` on
  ``blocks`` equal-width blocks of the grid and ``noise`` elsewhere (label noise: the agnostic setting; the
  best union of ``blocks`` intervals errs with probability ``noise``);
- ``noisy_threshold``: the same with P(y = 1 | x) = 1 - ``noise`` on the right half (thresholds' agnostic case);
- ``hard_coins``: the lower bound's fixed hard distribution (Chornomaz et al. 2025, Lemmas 12-14): ``d`` shattered
  points, uniform marginal, biases 1/2 + u_i with u_i i.i.d. from Lemma 12's distribution for the per-coin budget
  ``d * eta / 2`` (Lemma 14; needs 0 < eta < 1 / d).

:class:`LabeledPointsDataModule` hands the distribution to an analysis module: its test loader yields one batch
``{"points": [N], "weights": [N], "p_one": [N], "name": str}`` (float64 tensors).
"""

from __future__ import annotations

from typing import Any, Literal

import lightning as L
import numpy as np
import torch
from torch.utils.data import DataLoader

from trustlit.attacks.targeted_poisoning import FiniteDistribution, hard_coin_distribution
from trustlit.hparams import NonNegativeInt, OpenUnitInterval, PositiveInt, check_arguments

DistributionName = Literal["noisy_blocks", "noisy_threshold", "hard_coins"]


def noisy_blocks(points: int, blocks: int, noise: float) -> FiniteDistribution:
    """Uniform on 0..points-1; P(y = 1 | x) = 1 - noise on ``blocks`` blocks (cells 2j + 1 of 2 blocks + 1 equal
    cells), noise elsewhere."""
    grid = np.arange(points, dtype=np.float64)
    cell = np.floor(grid * (2 * blocks + 1) / points).astype(np.int64)
    return FiniteDistribution(grid, np.full(points, 1 / points), np.where(cell % 2 == 1, 1 - noise, noise))


def noisy_threshold(points: int, noise: float) -> FiniteDistribution:
    """Uniform on 0..points-1; P(y = 1 | x) = 1 - noise on the right half, noise on the left."""
    grid = np.arange(points, dtype=np.float64)
    return FiniteDistribution(grid, np.full(points, 1 / points), np.where(grid >= points / 2, 1 - noise, noise))


def labeled_distribution(
    name: str, points: int = 16, blocks: int = 1, noise: float = 0.25, d: int = 4, eta: float = 0.01, seed: int = 0
) -> FiniteDistribution:
    """The distribution ``name`` (module docstring)."""
    if name == "noisy_blocks":
        return noisy_blocks(points, blocks, noise)
    if name == "noisy_threshold":
        return noisy_threshold(points, noise)
    if name == "hard_coins":
        return hard_coin_distribution(d, eta, np.random.default_rng(seed))
    raise ValueError(f"distribution={name!r} is invalid, expected one of noisy_blocks, noisy_threshold, hard_coins")


def distribution_from_batch(batch: dict[str, Any]) -> FiniteDistribution:
    """The :class:`FiniteDistribution` a :class:`LabeledPointsDataModule` batch describes."""
    return FiniteDistribution(*(np.asarray(batch[key], dtype=np.float64) for key in ("points", "weights", "p_one")))


class LabeledPointsDataModule(L.LightningDataModule):
    """One labelled 1-D distribution for ``trustlit test`` (module docstring).

    Args:
        distribution: ``noisy_blocks``, ``noisy_threshold`` or ``hard_coins``.
        points: grid size N (the noisy distributions).
        blocks: how many blocks carry label 1 (``noisy_blocks``).
        noise: the label-noise rate (the noisy distributions).
        d: shattered points (``hard_coins``).
        eta: the poisoning budget the hard distribution is built for (``hard_coins``).
        seed: seeds the hard distribution's biases.
    """

    def __init__(
        self,
        distribution: DistributionName = "noisy_blocks",
        points: PositiveInt = 16,
        blocks: PositiveInt = 1,
        noise: OpenUnitInterval = 0.25,
        d: PositiveInt = 4,
        eta: OpenUnitInterval = 0.01,
        seed: NonNegativeInt = 0,
    ) -> None:
        super().__init__()
        check_arguments(LabeledPointsDataModule.__init__, locals())
        if noise >= 0.5:
            raise ValueError(f"LabeledPointsDataModule: noise={noise!r} is invalid, expected a rate in (0, 0.5)")
        if distribution == "noisy_blocks" and points < 2 * blocks + 1:
            raise ValueError(f"LabeledPointsDataModule: points={points!r} is invalid, expected >= 2 blocks + 1")
        self.save_hyperparameters()
        self.distribution: FiniteDistribution | None = None

    def setup(self, stage: str | None = None) -> None:
        if self.distribution is None:
            hp = self.hparams
            self.distribution = labeled_distribution(
                hp.distribution, int(hp.points), int(hp.blocks), float(hp.noise), int(hp.d), float(hp.eta), int(hp.seed)
            )

    def test_dataloader(self) -> DataLoader:
        self.setup("test")
        item = {
            key: torch.as_tensor(getattr(self.distribution, key), dtype=torch.float64)
            for key in ("points", "weights", "p_one")
        }
        return DataLoader([{**item, "name": self.hparams.distribution}], batch_size=None)
