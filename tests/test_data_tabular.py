"""Tests of trustlit.data.tabular: loading, stratified splits, scaling, row norms, batches."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import quiet_trainer

from trustlit.classifiers import MLPClassifier
from trustlit.data.samplers import EpochSeededSampler
from trustlit.data.tabular import SKLEARN_DATASETS, TabularDataModule, bound_row_norms, load_table, scale_features
from trustlit.privacy.pmsvm import PMSVM

# A hand-made table: 200 rows, labels 100/60/40, so a stratified 70/10/20 split has exact class counts.
NUM_ROWS = 200
CLASS_COUNTS = {0: 100, 1: 60, 2: 40}


def write_csv(path: Path, header: list[str], rows: list[list[object]]) -> Path:
    lines = [",".join(header)] + [",".join(str(v) for v in row) for row in rows]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


@pytest.fixture()
def synthetic_csv(tmp_path: Path) -> Path:
    """Columns: ``id`` (the row number, to track rows through the split), ``noise``, ``const``, ``label``."""
    rng = np.random.default_rng(123)
    labels = np.repeat(list(CLASS_COUNTS), list(CLASS_COUNTS.values()))
    rng.shuffle(labels)
    noise = rng.normal(5.0, 3.0, size=NUM_ROWS).round(4)
    rows = [[i, noise[i], 7, labels[i]] for i in range(NUM_ROWS)]
    return write_csv(tmp_path / "table.csv", ["id", "noise", "const", "label"], rows)


def make_dm(dataset: str, **kwargs) -> TabularDataModule:
    target = kwargs.pop("target_column", "label" if dataset.endswith(".csv") else None)
    dm = TabularDataModule(dataset=dataset, target_column=target, **kwargs)
    dm.setup("fit")
    return dm


def split_arrays(dm: TabularDataModule, name: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    x, y, index = dm.splits[name].tensors
    return x.numpy(), y.numpy(), index.numpy()


# --------------------------------------------------------------------------- load_table


@pytest.mark.parametrize(
    ("name", "shape", "num_classes"),
    [("digits", (1797, 64), 10), ("wine", (178, 13), 3), ("iris", (150, 4), 3), ("breast_cancer", (569, 30), 2)],
)
def test_every_bundled_dataset_loads(name, shape, num_classes):
    assert name in SKLEARN_DATASETS
    x, y = load_table(name)
    assert x.shape == shape
    assert x.dtype == np.float64
    assert y.dtype == np.int64
    assert y.shape == (shape[0],)
    assert sorted(np.unique(y).tolist()) == list(range(num_classes))


def test_bundled_names_are_exactly_the_documented_ones():
    assert sorted(SKLEARN_DATASETS) == ["breast_cancer", "digits", "iris", "wine"]


def test_unknown_name_lists_valid_names():
    with pytest.raises(ValueError, match="mnist") as info:
        load_table("mnist")
    for name in SKLEARN_DATASETS:
        assert name in str(info.value)


def test_missing_csv_names_the_path(tmp_path):
    path = tmp_path / "absent.csv"
    with pytest.raises(FileNotFoundError, match=r"absent\.csv") as info:
        load_table(str(path), target_column="label")
    assert str(path) in str(info.value)


def test_csv_without_target_column(synthetic_csv):
    with pytest.raises(ValueError, match="target_column") as info:
        load_table(str(synthetic_csv))
    assert str(synthetic_csv) in str(info.value)


def test_csv_unknown_target_column_names_it_and_the_columns(synthetic_csv):
    with pytest.raises(ValueError, match="'nope'") as info:
        load_table(str(synthetic_csv), target_column="nope")
    message = str(info.value)
    assert str(synthetic_csv) in message
    for column in ("id", "noise", "const", "label"):
        assert column in message


@pytest.mark.parametrize(("bad_row", "value"), [(1, ""), (3, "abc")])
def test_csv_missing_or_non_numeric_value_names_file_and_line(tmp_path, bad_row, value):
    rows = [[1, 2, 0], [3, 4, 1], [5, 6, 0], [7, 8, 1]]
    rows[bad_row][1] = value
    path = write_csv(tmp_path / "holes.csv", ["a", "b", "y"], rows)
    with pytest.raises(ValueError, match="missing or not a number") as info:
        load_table(str(path), target_column="y")
    # line 1 is the header, so data row r sits on line r + 2
    assert f"{path}:{bad_row + 2}:" in str(info.value)


def test_csv_with_header_only_is_empty(tmp_path):
    path = write_csv(tmp_path / "empty.csv", ["a", "b", "y"], [])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # numpy warns about an empty input file
        with pytest.raises(ValueError, match="empty") as info:
            load_table(str(path), target_column="y")
    assert str(path) in str(info.value)


def test_zero_byte_csv_is_an_error(tmp_path):
    path = tmp_path / "nothing.csv"
    path.write_text("", encoding="utf-8")
    with pytest.raises(ValueError, match="'y'") as info:
        load_table(str(path), target_column="y")
    assert str(path) in str(info.value)


def test_csv_round_trip_remaps_labels(tmp_path):
    # the label column sits between two features; labels 3/5/7 become 0/1/2 (sorted order)
    rows = [[0.5, 7, -1.0], [1.5, 3, -2.0], [2.5, 5, -3.0], [3.5, 3, -4.0], [4.5, 7, -5.0]]
    path = write_csv(tmp_path / "round.csv", ["f1", "label", "f2"], rows)
    x, y = load_table(str(path), target_column="label")
    np.testing.assert_array_equal(x, [[0.5, -1.0], [1.5, -2.0], [2.5, -3.0], [3.5, -4.0], [4.5, -5.0]])
    np.testing.assert_array_equal(y, [2, 0, 1, 0, 2])
    assert x.dtype == np.float64
    assert y.dtype == np.int64


def test_csv_with_a_single_row(tmp_path):
    path = write_csv(tmp_path / "one.csv", ["a", "b", "y"], [[1.0, 2.0, 4]])
    x, y = load_table(str(path), target_column="y")
    np.testing.assert_array_equal(x, [[1.0, 2.0]])
    np.testing.assert_array_equal(y, [0])


def test_csv_with_only_the_target_column(tmp_path):
    path = write_csv(tmp_path / "labels.csv", ["y"], [[1], [0], [1]])
    x, y = load_table(str(path), target_column="y")
    assert x.shape == (3, 0)
    np.testing.assert_array_equal(y, [1, 0, 1])


def test_datamodule_on_csv(synthetic_csv):
    dm = make_dm(str(synthetic_csv), scaling="none")
    assert dm.num_features == 3
    assert dm.num_classes == 3
    x, y, _ = split_arrays(dm, "train")
    # with scaling 'none', rows are the CSV's rows: noise and const columns, label remapped (already 0..2)
    original = np.genfromtxt(synthetic_csv, delimiter=",", skip_header=1)
    rows = x[:, 0].astype(int)
    np.testing.assert_allclose(x, original[rows, :3].astype(np.float32))
    np.testing.assert_array_equal(y, original[rows, 3].astype(int))


# --------------------------------------------------------------------------- splits


def test_split_sizes_and_exact_stratification_on_hand_made_table(synthetic_csv):
    dm = make_dm(str(synthetic_csv), scaling="none", val_fraction=0.1, test_fraction=0.2)
    expected_sizes = {"train": 140, "val": 20, "test": 40}
    for name, size in expected_sizes.items():
        _, y, _ = split_arrays(dm, name)
        assert len(y) == size
        counts = np.bincount(y, minlength=3)
        expected = [CLASS_COUNTS[c] * size // NUM_ROWS for c in range(3)]
        np.testing.assert_array_equal(counts, expected)


def test_splits_are_disjoint_and_cover_the_data(synthetic_csv):
    dm = make_dm(str(synthetic_csv), scaling="none")
    ids = {name: split_arrays(dm, name)[0][:, 0].astype(int) for name in ("train", "val", "test")}
    for name, values in ids.items():
        assert len(set(values.tolist())) == len(values), f"duplicate rows in {name}"
    assert not set(ids["train"]) & set(ids["val"])
    assert not set(ids["train"]) & set(ids["test"])
    assert not set(ids["val"]) & set(ids["test"])
    assert sorted(np.concatenate(list(ids.values())).tolist()) == list(range(NUM_ROWS))


@pytest.mark.parametrize("name", ["digits", "breast_cancer"])
def test_stratified_split_keeps_class_proportions(name):
    _, labels = load_table(name)
    n = len(labels)
    num_classes = labels.max() + 1
    full = np.bincount(labels, minlength=num_classes) / n
    dm = make_dm(name, val_fraction=0.1, test_fraction=0.2, scaling="none")
    sizes = {}
    for split in ("train", "val", "test"):
        _, y, _ = split_arrays(dm, split)
        sizes[split] = len(y)
        proportions = np.bincount(y, minlength=num_classes) / len(y)
        # stratification is exact up to rounding: at most 2 samples per class off
        assert np.abs(proportions - full).max() <= 2 / len(y) + 1e-12, split
    assert sum(sizes.values()) == n
    for split, fraction in (("val", 0.1), ("test", 0.2), ("train", 0.7)):
        assert abs(sizes[split] - fraction * n) <= 2, (split, sizes[split], fraction * n)


def test_same_seed_same_split_and_different_seed_different_split(synthetic_csv):
    a = make_dm(str(synthetic_csv), scaling="none", seed=5)
    b = make_dm(str(synthetic_csv), scaling="none", seed=5)
    c = make_dm(str(synthetic_csv), scaling="none", seed=6)
    for name in ("train", "val", "test"):
        for ta, tb in zip(a.splits[name].tensors, b.splits[name].tensors, strict=True):
            assert torch.equal(ta, tb)
    ids_a = set(split_arrays(a, "test")[0][:, 0].tolist())
    ids_c = set(split_arrays(c, "test")[0][:, 0].tolist())
    assert ids_a != ids_c


def test_zero_val_fraction_gives_empty_val_split(synthetic_csv):
    dm = make_dm(str(synthetic_csv), scaling="none", val_fraction=0.0, test_fraction=0.25)
    assert len(dm.splits["val"]) == 0
    assert len(dm.splits["test"]) == 50
    assert len(dm.splits["train"]) == 150


def test_setup_twice_keeps_the_split(synthetic_csv):
    dm = make_dm(str(synthetic_csv), scaling="standard")
    before = dm.splits["train"].tensors[0].clone()
    dm.setup("test")
    assert torch.equal(dm.splits["train"].tensors[0], before)


@pytest.mark.parametrize(
    ("val_fraction", "test_fraction"),
    [(-0.1, 0.2), (1.0, 0.2), (0.1, 0.0), (0.1, 1.0), (0.1, -0.2), (0.5, 0.5), (0.6, 0.5)],
)
def test_invalid_fractions(val_fraction, test_fraction):
    with pytest.raises(ValueError, match="val_fraction"):
        TabularDataModule(val_fraction=val_fraction, test_fraction=test_fraction)


@pytest.mark.parametrize("batch_size", [0, -3])
def test_invalid_batch_size(batch_size):
    with pytest.raises(ValueError, match="batch_size"):
        TabularDataModule(batch_size=batch_size)


# --------------------------------------------------------------------------- scaling


def test_scale_features_standard_closed_form():
    train = np.array([[0.0, 1.0, 2.0], [2.0, 1.0, 6.0]])
    other = np.array([[3.0, 5.0, 4.0]])
    scaled_train, scaled_other = scale_features(train, [other], "standard")
    # mean [1, 1, 4], std [1, 0 -> 1, 2]
    np.testing.assert_allclose(scaled_train, [[-1.0, 0.0, -1.0], [1.0, 0.0, 1.0]])
    np.testing.assert_allclose(scaled_other, [[2.0, 4.0, 0.0]])


def test_scale_features_minmax_closed_form():
    train = np.array([[0.0, 1.0, -2.0], [2.0, 1.0, 2.0], [1.0, 1.0, 0.0]])
    other = np.array([[3.0, 5.0, 4.0]])
    scaled_train, scaled_other = scale_features(train, [other], "minmax")
    # min [0, 1, -2], range [2, 0 -> 1, 4]
    np.testing.assert_allclose(scaled_train, [[0.0, 0.0, 0.0], [1.0, 0.0, 1.0], [0.5, 0.0, 0.5]])
    np.testing.assert_allclose(scaled_other, [[1.5, 4.0, 1.5]])


def test_scale_features_none_and_bad_value():
    train, other = np.ones((2, 2)), np.zeros((1, 2))
    result = scale_features(train, [other], "none")
    assert result[0] is train and result[1] is other
    with pytest.raises(ValueError, match="'zscore'"):
        scale_features(train, [other], "zscore")


def test_standard_scaling_of_the_train_split(synthetic_csv):
    dm = make_dm(str(synthetic_csv), scaling="standard")
    x, _, _ = split_arrays(dm, "train")
    np.testing.assert_allclose(x.mean(axis=0), [0.0, 0.0, 0.0], atol=1e-5)
    np.testing.assert_allclose(x.std(axis=0), [1.0, 1.0, 0.0], atol=1e-5)
    # the constant column is 0 everywhere, in every split
    for name in ("train", "val", "test"):
        assert np.all(split_arrays(dm, name)[0][:, 2] == 0.0)


def test_minmax_scaling_of_the_train_split(synthetic_csv):
    dm = make_dm(str(synthetic_csv), scaling="minmax")
    x, _, _ = split_arrays(dm, "train")
    np.testing.assert_allclose(x.min(axis=0), [0.0, 0.0, 0.0], atol=1e-6)
    np.testing.assert_allclose(x.max(axis=0), [1.0, 1.0, 0.0], atol=1e-6)


@pytest.mark.parametrize("scaling", ["standard", "minmax"])
def test_scaling_statistics_come_from_train_only(synthetic_csv, scaling):
    raw = make_dm(str(synthetic_csv), scaling="none", seed=3)
    scaled = make_dm(str(synthetic_csv), scaling=scaling, seed=3)
    train = split_arrays(raw, "train")[0].astype(np.float64)
    if scaling == "standard":
        center, scale = train.mean(axis=0), train.std(axis=0)
    else:
        center, scale = train.min(axis=0), train.max(axis=0) - train.min(axis=0)
    scale[scale == 0] = 1.0
    for name in ("train", "val", "test"):
        expected = (split_arrays(raw, name)[0] - center) / scale
        np.testing.assert_allclose(split_arrays(scaled, name)[0], expected, rtol=1e-5, atol=1e-5)
        np.testing.assert_array_equal(split_arrays(scaled, name)[1], split_arrays(raw, name)[1])


def test_invalid_scaling_raises_at_setup(synthetic_csv):
    dm = TabularDataModule(dataset=str(synthetic_csv), target_column="label", scaling="robust")
    with pytest.raises(ValueError, match="scaling"):
        dm.setup("fit")


# --------------------------------------------------------------------------- row norms


def test_bound_row_norms_closed_form():
    x = np.array([[3.0, 4.0], [0.0, 0.0], [0.3, 0.4], [6.0, -8.0], [0.6, 0.8]])
    np.testing.assert_allclose(
        bound_row_norms(x, "normalize"), [[0.6, 0.8], [0.0, 0.0], [0.6, 0.8], [0.6, -0.8], [0.6, 0.8]]
    )
    clipped = bound_row_norms(x, "clip")
    np.testing.assert_allclose(clipped, [[0.6, 0.8], [0.0, 0.0], [0.3, 0.4], [0.6, -0.8], [0.6, 0.8]])
    # rows with norm <= 1 are left exactly as they were
    np.testing.assert_array_equal(clipped[1:3], x[1:3])
    np.testing.assert_array_equal(clipped[4], x[4])
    assert bound_row_norms(x, "none") is x


@pytest.mark.parametrize("row_norm", ["l2", "Normalize", ""])
def test_bound_row_norms_bad_value(row_norm):
    with pytest.raises(ValueError, match="row_norm"):
        bound_row_norms(np.ones((2, 2)), row_norm)


def test_invalid_row_norm_raises_at_setup(synthetic_csv):
    dm = TabularDataModule(dataset=str(synthetic_csv), target_column="label", row_norm="unit")
    with pytest.raises(ValueError, match="row_norm"):
        dm.setup("fit")


def test_row_norm_normalize_in_datamodule():
    dm = make_dm("wine", scaling="standard", row_norm="normalize")
    for name in ("train", "val", "test"):
        norms = np.linalg.norm(split_arrays(dm, name)[0], axis=1)
        np.testing.assert_allclose(norms, 1.0, atol=1e-5)


def test_row_norm_clip_in_datamodule_is_applied_after_scaling():
    plain = make_dm("wine", scaling="minmax", row_norm="none")
    clipped = make_dm("wine", scaling="minmax", row_norm="clip")
    for name in ("train", "val", "test"):
        x = split_arrays(plain, name)[0].astype(np.float64)
        norms = np.linalg.norm(x, axis=1, keepdims=True)
        expected = x * np.minimum(1.0, 1.0 / norms)
        got = split_arrays(clipped, name)[0]
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(np.linalg.norm(got, axis=1), np.minimum(norms[:, 0], 1.0), rtol=1e-5)


# --------------------------------------------------------------------------- batches and samplers


def test_train_batches_and_index_cover_the_split_once():
    dm = make_dm("digits", batch_size=50, seed=1)
    loader = dm.train_dataloader()
    x_all, y_all, _ = dm.splits["train"].tensors
    seen = []
    for x, y, index in loader:
        assert x.dtype == torch.float32
        assert y.dtype == torch.int64
        assert index.dtype == torch.int64
        assert x.shape == (len(index), 64)
        # index is the position within the split
        assert torch.equal(x, x_all[index])
        assert torch.equal(y, y_all[index])
        seen.append(index)
    order = torch.cat(seen)
    assert sorted(order.tolist()) == list(range(len(dm.splits["train"])))
    assert order.tolist() != sorted(order.tolist()), "training order should be shuffled"


def test_train_order_follows_the_sampler_epoch():
    dm = make_dm("iris", batch_size=16, seed=2)

    def epoch_order(epoch: int) -> list[int]:
        loader = dm.train_dataloader()
        loader.sampler.set_epoch(epoch)
        return torch.cat([index for _, _, index in loader]).tolist()

    assert isinstance(dm.train_dataloader().sampler, EpochSeededSampler)
    assert epoch_order(0) == epoch_order(0)
    assert epoch_order(0) != epoch_order(1)
    assert sorted(epoch_order(1)) == list(range(len(dm.splits["train"])))


@pytest.mark.parametrize("name", ["val", "test"])
def test_eval_loaders_are_in_order(name):
    dm = make_dm("iris", batch_size=7)
    loader = dm.val_dataloader() if name == "val" else dm.test_dataloader()
    batches = list(loader)
    assert all(x.dtype == torch.float32 and y.dtype == torch.int64 for x, y, _ in batches)
    assert torch.cat([index for _, _, index in batches]).tolist() == list(range(len(dm.splits[name])))


def test_epoch_seeded_sampler():
    sampler = EpochSeededSampler(50, seed=3)
    first = list(sampler)
    assert len(sampler) == 50
    assert sorted(first) == list(range(50))
    assert first != list(range(50))
    # the order depends only on (seed, epoch): not on the global RNG, not on earlier iterations
    torch.manual_seed(999)
    assert list(sampler) == first
    assert list(EpochSeededSampler(50, seed=3)) == first
    assert list(EpochSeededSampler(50, seed=4)) != first
    sampler.set_epoch(1)
    second = list(sampler)
    assert second != first
    assert sorted(second) == list(range(50))
    other = EpochSeededSampler(50, seed=3)
    other.set_epoch(1)
    assert list(other) == second
    sampler.set_epoch(0)
    assert list(sampler) == first


@pytest.mark.parametrize(
    "build",
    [lambda: MLPClassifier(num_features=10), lambda: PMSVM("weight", num_features=10, epsilon=1e6)],
    ids=["MLPClassifier", "PMSVM"],
)
def test_a_model_of_another_width_is_refused_at_setup_naming_both(build):
    """Also under a stock Trainer, not only through the CLI."""
    with pytest.raises(ValueError, match=r"num_features=10 but the data \(TabularDataModule\) has 64 features"):
        quiet_trainer(max_steps=1).fit(build(), datamodule=TabularDataModule("digits"))
