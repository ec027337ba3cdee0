"""The synthetic hierarchical features (trustlit.data.hierarchy): the geometry of the construction, the
samples' sparsity and the batch format shared with ActivationDataModule."""

from __future__ import annotations

import pytest
import torch

from trustlit.data.hierarchy import HierarchicalFeaturesDataModule, hierarchical_features, sample_hierarchical


def test_children_are_conditionally_orthogonal_within_their_parent():
    hierarchy = hierarchical_features(16, 4, 5, 0.6, torch.Generator().manual_seed(0))
    parents, children = hierarchy.parents, hierarchy.children
    assert parents.shape == (4, 16) and children.shape == (4, 5, 16)
    torch.testing.assert_close(parents @ parents.T, torch.eye(4), atol=1e-5, rtol=0)
    torch.testing.assert_close(children.norm(dim=-1), torch.ones(4, 5))
    for parent, family in zip(parents, children, strict=True):
        torch.testing.assert_close(family @ parent, torch.full((5,), 0.6), atol=1e-5, rtol=0)
        specific = family - (family @ parent).unsqueeze(-1) * parent  # the child given its parent
        torch.testing.assert_close(specific @ specific.T, (1 - 0.36) * torch.eye(5), atol=1e-5, rtol=0)
    # children of different parents are not constrained: they correlate through the parents only by chance
    assert (children[0] @ children[1].T).abs().max() > 1e-3


def test_each_sample_activates_parents_with_one_of_their_children_plus_noise():
    generator = torch.Generator().manual_seed(1)
    hierarchy = hierarchical_features(32, 6, 3, 0.5, generator)
    x, codes = sample_hierarchical(hierarchy, 500, 2, 0.0, generator)
    parent_codes, child_codes = codes[:, :6], codes[:, 6:].view(500, 6, 3)
    assert ((parent_codes != 0).sum(-1) == 2).all()
    assert torch.equal((child_codes != 0).sum(-1), (parent_codes != 0).long()), "one child of each active parent"
    assert ((codes == 0) | ((codes >= 0.5) & (codes <= 1.5))).all()
    torch.testing.assert_close(x, codes @ hierarchy.features)
    # the same draws with noise of norm sigma = 0.3 on average (the noise is drawn last)
    noisy, _ = sample_hierarchical(hierarchy, 2000, 2, 0.3, torch.Generator().manual_seed(2))
    clean, _ = sample_hierarchical(hierarchy, 2000, 2, 0.0, torch.Generator().manual_seed(2))
    assert abs((noisy - clean).norm(dim=-1).mean().item() - 0.3) < 0.02


def test_batches_have_the_activation_data_module_format_and_the_ground_truth():
    data = HierarchicalFeaturesDataModule(
        dim=24, num_parents=5, children_per_parent=2, num_train=300, num_val=50, batch_size=64
    )
    batch = next(iter(data.train_dataloader()))
    assert set(batch) == {"activations", "index", "row", "token_position"}
    assert batch["activations"].shape == (64, 24) and batch["activations"].dtype == torch.float32
    assert torch.equal(batch["activations"], data.train_x[batch["row"]])
    assert data.hidden_size == 24 and data.features.shape == (5 + 10, 24)
    assert sum(len(b["row"]) for b in data.val_dataloader()) == 50
    again = HierarchicalFeaturesDataModule(dim=24, num_parents=5, children_per_parent=2, num_train=300, num_val=50)
    assert torch.equal(again.train_x, data.train_x), "seeded"


def test_bad_sizes_are_one_line_errors():
    with pytest.raises(ValueError, match=r"parents_per_sample=3 is invalid, expected at most num_parents=2"):
        HierarchicalFeaturesDataModule(num_parents=2, parents_per_sample=3)
    with pytest.raises(ValueError, match=r"children_per_parent=8 needs dim >= 9, got dim=8"):
        HierarchicalFeaturesDataModule(dim=8, children_per_parent=8)
    with pytest.raises(
        ValueError,
        match=r"^HierarchicalFeaturesDataModule: child_cosine=1.0 is invalid, expected a number in \(0, 1\)$",
    ):
        HierarchicalFeaturesDataModule(child_cosine=1.0)
