"""Synthetic hierarchical features (the construction of Costa et al. 2025, arXiv 2506.03093, Section 3):
activations with known features whose children are conditionally orthogonal within their parent.

Features in R^D: P parents p_i (random unit vectors; orthonormal when P <= D) and, for each parent, C
children c_ij = cos(a) p_i + sin(a) u_ij, where the u_ij (j = 1..C) are orthonormal and orthogonal to p_i.
The children of one parent are then orthogonal to each other once their parent is projected out
(conditional orthogonality) while each is correlated with its parent (cosine cos(a), ``child_cosine``).

A sample picks ``parents_per_sample`` distinct parents uniformly; for each, one of its children uniformly;
x = sum over picked (i, j) of (s_p p_i + s_c c_ij) + sigma * eps, with magnitudes s ~ U[0.5, 1.5] and
eps ~ N(0, I_D / D) (so sigma is the noise norm's scale). The ground-truth features [P + P C, D] come
with the data for recovery scoring (:func:`trustlit.interpret.sae.metrics.feature_recovery`).

:class:`HierarchicalFeaturesDataModule` serves batches in :class:`~trustlit.data.activations.ActivationDataModule`'s
format, ``{"activations": [B, D], "index": [B], "row": [B], "token_position": [B]}``, so every SAE
trains from either.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import lightning as L
import torch
from torch.utils.data import DataLoader, Dataset

from trustlit.hparams import NonNegativeFloat, OpenUnitInterval, PositiveInt, check_arguments


class Hierarchy(NamedTuple):
    """Ground truth: parents [P, D], children [P, C, D] (unit vectors)."""

    parents: torch.Tensor
    children: torch.Tensor

    @property
    def features(self) -> torch.Tensor:
        """Every true feature, parents first: [P + P C, D]."""
        return torch.cat([self.parents, self.children.flatten(0, 1)])


def hierarchical_features(
    dim: int, num_parents: int, children_per_parent: int, child_cosine: float, generator: torch.Generator
) -> Hierarchy:
    """Parents and conditionally orthogonal children (see the module docstring)."""
    if children_per_parent + 1 > dim:
        raise ValueError(
            f"hierarchical_features: children_per_parent={children_per_parent} needs dim >= {children_per_parent + 1}, "
            f"got dim={dim}"
        )
    gaussian = torch.randn(dim, max(num_parents, 1), generator=generator)
    parents = torch.linalg.qr(gaussian).Q.T if num_parents <= dim else gaussian.T
    parents = torch.nn.functional.normalize(parents[:num_parents], dim=-1)
    children = []
    for parent in parents:
        # an orthonormal basis whose first vector is the parent: the others are orthogonal to it and to each other
        basis = torch.linalg.qr(
            torch.cat([parent[:, None], torch.randn(dim, children_per_parent, generator=generator)], 1)
        )
        directions = basis.Q[:, 1:].T * torch.sign(basis.R.diagonal()[1:]).unsqueeze(-1)
        sine = math.sqrt(1 - child_cosine**2)
        children.append(child_cosine * parent + sine * directions)
    return Hierarchy(parents, torch.stack(children))


def sample_hierarchical(
    hierarchy: Hierarchy, num_samples: int, parents_per_sample: int, noise_std: float, generator: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(x [N, D], codes [N, P + P C])``: samples and their true feature coefficients (see the module docstring)."""
    num_parents, num_children, dim = hierarchy.children.shape
    picked = torch.rand(num_samples, num_parents, generator=generator).argsort(dim=-1)[:, :parents_per_sample]
    child = torch.randint(num_children, (num_samples, parents_per_sample), generator=generator)
    parent_scale = 0.5 + torch.rand(num_samples, parents_per_sample, generator=generator)
    child_scale = 0.5 + torch.rand(num_samples, parents_per_sample, generator=generator)
    codes = torch.zeros(num_samples, num_parents + num_parents * num_children)
    codes.scatter_(1, picked, parent_scale)
    codes.scatter_(1, num_parents + picked * num_children + child, child_scale)
    noise = torch.randn(num_samples, dim, generator=generator) * (noise_std / math.sqrt(dim))
    return codes @ hierarchy.features + noise, codes


class FeatureRows(Dataset):
    """Rows of a fixed tensor, batched by ``__getitems__`` in ActivationDataModule's format."""

    def __init__(self, activations: torch.Tensor) -> None:
        self.activations = activations

    def __len__(self) -> int:
        return len(self.activations)

    def __getitems__(self, items: list[int]) -> dict[str, torch.Tensor]:
        rows = torch.as_tensor(items, dtype=torch.long)
        return {
            "activations": self.activations[rows],
            "index": rows,
            "row": rows,
            "token_position": torch.zeros_like(rows),
        }

    def __getitem__(self, item: int) -> dict[str, torch.Tensor]:
        return {key: value[0] for key, value in self.__getitems__([item]).items()}


def as_batch(batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return batch


class HierarchicalFeaturesDataModule(L.LightningDataModule):
    """Synthetic hierarchical activations with ground-truth features (see the module docstring).

    Args:
        dim: D, the width of ``activations`` (an SAE's d_in).
        num_parents: P.
        children_per_parent: C (at most D - 1).
        child_cosine: cos(a), the cosine between a child and its parent.
        parents_per_sample: parents (each with one child) active in a sample (at most P).
        noise_std: sigma, the scale of the noise's norm.
        num_train: training samples (drawn once, fixed).
        num_val: validation samples.
        batch_size: rows per batch.
        seed: seeds the features, the samples and the training order.
    """

    def __init__(
        self,
        dim: PositiveInt = 64,
        num_parents: PositiveInt = 16,
        children_per_parent: PositiveInt = 4,
        child_cosine: OpenUnitInterval = 0.5,
        parents_per_sample: PositiveInt = 2,
        noise_std: NonNegativeFloat = 0.05,
        num_train: PositiveInt = 16384,
        num_val: PositiveInt = 2048,
        batch_size: PositiveInt = 256,
        seed: int = 0,
    ) -> None:
        super().__init__()
        check_arguments(HierarchicalFeaturesDataModule.__init__, locals())
        if parents_per_sample > num_parents:
            raise ValueError(
                f"HierarchicalFeaturesDataModule: parents_per_sample={parents_per_sample} is invalid, "
                f"expected at most num_parents={num_parents}"
            )
        generator = torch.Generator().manual_seed(seed)
        self.hierarchy = hierarchical_features(
            int(dim), int(num_parents), int(children_per_parent), child_cosine, generator
        )
        self.train_x, self.train_codes = sample_hierarchical(
            self.hierarchy, int(num_train), int(parents_per_sample), float(noise_std), generator
        )
        self.val_x, self.val_codes = sample_hierarchical(
            self.hierarchy, int(num_val), int(parents_per_sample), float(noise_std), generator
        )
        self.batch_size = int(batch_size)
        self.seed = seed

    @property
    def hidden_size(self) -> int:
        """D, the width of ``activations``."""
        return self.train_x.shape[-1]

    @property
    def features(self) -> torch.Tensor:
        """The ground-truth features [P + P C, D], parents first."""
        return self.hierarchy.features

    def train_dataloader(self) -> DataLoader:
        # one generator for the loader's life: a new order each epoch, the same orders for the same seed
        generator = torch.Generator().manual_seed(self.seed)
        return DataLoader(
            FeatureRows(self.train_x),
            batch_size=self.batch_size,
            shuffle=True,
            generator=generator,
            collate_fn=as_batch,
        )

    def val_dataloader(self) -> DataLoader:
        return DataLoader(FeatureRows(self.val_x), batch_size=self.batch_size, shuffle=False, collate_fn=as_batch)
