"""Protection leakage (BridgePure's threat model, Wang et al., NeurIPS 2025): a black-box protection P is applied to
a training release; the adversary holds a small leaked set of (clean, protected) pairs D_a = {(x, P(x))}, disjoint
from the protected images D' it wants to purify.

:class:`LeakedPairsDataModule` draws the release from an :class:`~trustlit.data.images.ImageClassificationDataModule`
source, fits the protection on the whole release and protects it, and splits off a seeded ``leaked_fraction`` of it
as D_a (at least one pair). Batches are ``{"clean": [B, C, H, W], "protected": [B, C, H, W]}`` in [0, 1]:
``train`` serves D_a; ``val`` and ``test`` serve ``eval_pairs`` pairs of D' with their clean originals, for
measuring how close purification comes to them (the adversary never sees those originals).
For a downstream classifier, :attr:`LeakedPairsDataModule.release` holds D' with labels and the clean test split.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import lightning as L
import torch
from torch import Tensor
from torch.utils.data import DataLoader, Dataset

from trustlit.data.images import ImageClassificationDataModule, Source, check_images, seeded_subset
from trustlit.hparams import OpenUnitInterval, PositiveInt, check_arguments


class LeakedPairs(Dataset):
    """Paired (clean, protected) images: the same number of each, the same shape, values in [0, 1]."""

    def __init__(self, clean: Tensor, protected: Tensor) -> None:
        check_pairs(clean, protected)
        self.clean, self.protected = clean, protected

    def __len__(self) -> int:
        return len(self.clean)

    def __getitem__(self, index: int) -> dict[str, Tensor]:
        return {"clean": self.clean[index], "protected": self.protected[index]}


def check_pairs(clean: Tensor, protected: Tensor) -> None:
    """Refuse unpaired leakage: images checked, one protected image per clean one, shapes equal."""
    check_images(clean, "leaked clean images")
    check_images(protected, "leaked protected images")
    if len(clean) != len(protected):
        raise ValueError(
            f"leaked pairs are unpaired: {len(clean)} clean images but {len(protected)} protected ones, "
            "expected one protected image per clean image"
        )
    if clean.shape != protected.shape:
        raise ValueError(
            f"leaked pairs are mismatched: clean images {list(clean.shape[1:])} but protected "
            f"{list(protected.shape[1:])}, expected the same [C, H, W]"
        )
    if len(clean) == 0:
        raise ValueError("leaked pairs are empty, expected at least one (clean, protected) pair")


@dataclass(frozen=True)
class ProtectedRelease:
    """What the adversary purifies and what judges it: D' (protected), its clean originals and labels, and the
    clean test split."""

    protected: Tensor
    clean: Tensor
    labels: Tensor
    test_images: Tensor
    test_labels: Tensor


def leak_split(count: int, leaked_fraction: float, seed: int) -> tuple[Tensor, Tensor]:
    """Indices (leaked, rest) of a seeded permutation: round(fraction * count) leaked, at least one, one left."""
    if count < 2:
        raise ValueError(f"a release of {count} image(s) cannot be split, expected at least 2")
    leaked = min(max(1, round(leaked_fraction * count)), count - 1)
    order = torch.randperm(count, generator=torch.Generator().manual_seed(seed))
    return order[:leaked], order[leaked:]


def resized(images: Tensor, side: int) -> Tensor:
    """Images resized to ``side`` x ``side`` by area averaging (bilinear when enlarging), kept in [0, 1]."""
    mode = "area" if side <= images.shape[-1] else "bilinear"
    return torch.nn.functional.interpolate(images, size=(side, side), mode=mode).clamp(0, 1)


class LeakedPairsDataModule(L.LightningDataModule):
    """Leaked (clean, protected) pairs for training a purifier (see the module docstring).

    Args:
        source, root, num_train, num_test: the image source, as
            :class:`~trustlit.data.images.ImageClassificationDataModule`.
        protection: ``{"name": <a trustlit.protection.availability.PROTECTIONS key>, **arguments}``.
        leaked_fraction: the share of the release leaked as pairs, in (0, 1).
        resize: None, or the side every image is resized to (area averaging) before protection: a cheaper release.
        eval_pairs: pairs of D' served (with their clean originals) by the val and test loaders.
        batch_size: batch size of every loader.
        seed: seeds the subsets, the protection and the leak split.
    """

    def __init__(
        self,
        source: Source = "generated",
        root: str | None = None,
        num_train: PositiveInt | None = None,
        num_test: PositiveInt | None = None,
        protection: dict[str, Any] | None = None,
        leaked_fraction: OpenUnitInterval = 0.1,
        resize: PositiveInt | None = None,
        eval_pairs: PositiveInt = 256,
        batch_size: PositiveInt = 64,
        seed: int = 0,
    ) -> None:
        super().__init__()
        check_arguments(LeakedPairsDataModule.__init__, locals())
        protection = protection or {"name": "linear_separable"}
        self.images = ImageClassificationDataModule(
            source=source, root=root, num_train=num_train, num_test=num_test, protection=protection, seed=seed
        )  # validates source, root and protection; its load() reads the source
        self.save_hyperparameters()
        self.hparams["protection"] = dict(protection)
        self.leaked: LeakedPairs | None = None
        self.release: ProtectedRelease | None = None

    @property
    def num_classes(self) -> int:
        return int(self.release.labels.max()) + 1

    def setup(self, stage: str | None = None) -> None:
        if self.leaked is not None:
            return
        from trustlit.protection.availability import build_protection

        hp, seed = self.hparams, self.hparams.seed
        train_images, train_labels, test_images, test_labels = self.images.load()
        train_images, train_labels = seeded_subset(train_images, train_labels, hp.num_train, seed)
        test_images, test_labels = seeded_subset(test_images, test_labels, hp.num_test, seed + 1)
        if hp.resize is not None:
            train_images, test_images = (resized(images, hp.resize) for images in (train_images, test_images))
        arguments = {key: value for key, value in hp.protection.items() if key != "name"}
        protection = build_protection(hp.protection["name"], **{"seed": seed, **arguments})
        protected = protection.fit(train_images, train_labels).protect(train_images, train_labels)
        leaked, rest = leak_split(len(train_labels), hp.leaked_fraction, seed)
        self.leaked = LeakedPairs(train_images[leaked], protected[leaked])
        self.release = ProtectedRelease(
            protected[rest], train_images[rest], train_labels[rest], test_images, test_labels
        )

    def eval_set(self) -> LeakedPairs:
        count = min(self.hparams.eval_pairs, len(self.release.labels))
        return LeakedPairs(self.release.clean[:count], self.release.protected[:count])

    def train_dataloader(self) -> DataLoader:
        generator = torch.Generator().manual_seed(self.hparams.seed)
        return DataLoader(self.leaked, batch_size=self.hparams.batch_size, shuffle=True, generator=generator)

    def val_dataloader(self) -> DataLoader:
        return DataLoader(self.eval_set(), batch_size=self.hparams.batch_size)

    def test_dataloader(self) -> DataLoader:
        return DataLoader(self.eval_set(), batch_size=self.hparams.batch_size)
