"""Image classifiers for ``(image, label)`` batches: a small CNN and a narrow ResNet-18, as a LightningModule and
as plain torch helpers (:func:`fit_classifier`, :func:`accuracy`) fast enough on CPU to be called hundreds of times
(the availability-attack and purification benchmarks train one classifier per protection, purifier and seed)."""

from __future__ import annotations

from typing import Any, Literal

import lightning as L
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from trustlit.data.images import check_images
from trustlit.hparams import NonNegativeFloat, PositiveFloat, PositiveInt, check_arguments, plain_numbers
from trustlit.metrics import log_accuracy

Architecture = Literal["cnn", "resnet"]
ARCHITECTURES = ("cnn", "resnet")


def conv_block(width_in: int, width_out: int, stride: int = 1) -> list[nn.Module]:
    """3x3 convolution, batch norm, ReLU."""
    return [nn.Conv2d(width_in, width_out, 3, stride, 1, bias=False), nn.BatchNorm2d(width_out), nn.ReLU()]


class SmallCNN(nn.Module):
    """Two conv blocks (``width`` and 2 ``width`` channels, each followed by 2x2 max-pooling), adaptive average
    pooling to a 4x4 grid (so any image size works and coarse position survives) and a linear head."""

    def __init__(self, in_channels: int, num_classes: int, width: int = 32) -> None:
        super().__init__()
        self.features = nn.Sequential(
            *conv_block(in_channels, width),
            nn.MaxPool2d(2),
            *conv_block(width, 2 * width),
            nn.MaxPool2d(2),
            nn.AdaptiveAvgPool2d(4),
            nn.Flatten(),
        )
        self.head = nn.Linear(2 * width * 16, num_classes)

    def forward(self, x: Tensor) -> Tensor:
        return self.head(self.features(x))


class BasicBlock(nn.Module):
    """The ResNet basic block (He et al. 2016): two 3x3 conv-BN layers and a (projected) identity shortcut."""

    def __init__(self, width_in: int, width_out: int, stride: int) -> None:
        super().__init__()
        self.body = nn.Sequential(
            *conv_block(width_in, width_out, stride),
            nn.Conv2d(width_out, width_out, 3, 1, 1, bias=False),
            nn.BatchNorm2d(width_out),
        )
        self.shortcut = (
            nn.Identity()
            if stride == 1 and width_in == width_out
            else nn.Sequential(nn.Conv2d(width_in, width_out, 1, stride, bias=False), nn.BatchNorm2d(width_out))
        )

    def forward(self, x: Tensor) -> Tensor:
        return F.relu(self.body(x) + self.shortcut(x))


class ResNet(nn.Module):
    """ResNet-18 for small images (the CIFAR variant the availability-attack papers train: a 3x3 stem, four
    stages of two basic blocks, widths ``width`` x (1, 2, 4, 8); ``width=64`` is the usual ResNet-18)."""

    def __init__(self, in_channels: int, num_classes: int, width: int = 16) -> None:
        super().__init__()
        widths = [width, 2 * width, 4 * width, 8 * width]
        layers: list[nn.Module] = conv_block(in_channels, width)
        for stage, width_out in enumerate(widths):
            width_in = widths[max(stage - 1, 0)]
            layers += [BasicBlock(width_in, width_out, 1 if stage == 0 else 2), BasicBlock(width_out, width_out, 1)]
        self.features = nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten())
        self.head = nn.Linear(widths[-1], num_classes)

    def forward(self, x: Tensor) -> Tensor:
        return self.head(self.features(x))


def build_classifier(
    architecture: Architecture, in_channels: int, num_classes: int, width: int | None = None
) -> nn.Module:
    """``SmallCNN`` (``cnn``, width 32 by default) or ``ResNet`` (``resnet``, width 16 by default)."""
    if architecture == "cnn":
        return SmallCNN(in_channels, num_classes, width or 32)
    if architecture == "resnet":
        return ResNet(in_channels, num_classes, width or 16)
    raise ValueError(f"architecture={architecture!r} is invalid, expected one of {ARCHITECTURES}")


def check_labels(images: Tensor, labels: Tensor) -> None:
    """``labels``: int64 ``[N]`` matching the ``N`` images, all >= 0."""
    if labels.dim() != 1 or len(labels) != len(images) or labels.dtype != torch.long:
        raise ValueError(
            f"labels: expected int64 [N] with N={len(images)} (one per image), got shape {list(labels.shape)}, "
            f"dtype {labels.dtype}"
        )
    if len(labels) and labels.min() < 0:
        raise ValueError(f"labels: expected class ids >= 0, got {labels.min().item()}")


def fit_classifier(
    images: Tensor,
    labels: Tensor,
    *,
    epochs: int = 5,
    batch_size: int = 128,
    lr: float = 1e-3,
    weight_decay: float = 0.0,
    seed: int = 0,
    architecture: Architecture = "cnn",
    width: int | None = None,
    num_classes: int | None = None,
) -> nn.Module:
    """Train a fresh classifier with Adam on cross-entropy for ``epochs`` passes over ``(images, labels)`` in a
    seeded order (no augmentation), on the images' device; returned in eval mode. ``num_classes`` defaults to
    ``max(labels) + 1``."""
    check_images(images, "images")
    check_labels(images, labels)
    if epochs < 1 or batch_size < 1 or lr <= 0:
        raise ValueError(f"fit_classifier: epochs={epochs}, batch_size={batch_size}, lr={lr} must all be > 0")
    generator = torch.Generator().manual_seed(seed)
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        model = build_classifier(architecture, images.shape[1], num_classes or int(labels.max()) + 1, width)
    model.to(images.device)
    optimizer = torch.optim.Adam(model.parameters(), lr=lr, weight_decay=weight_decay)
    model.train()
    for _ in range(epochs):
        for batch in torch.randperm(len(labels), generator=generator).split(batch_size):
            optimizer.zero_grad()
            F.cross_entropy(model(images[batch]), labels[batch]).backward()
            optimizer.step()
    return model.eval()


@torch.no_grad()
def predict(model: nn.Module, images: Tensor, batch_size: int = 512) -> Tensor:
    """``argmax model(x)`` over ``images`` in eval mode, batch by batch."""
    model.eval()
    return torch.cat([model(part).argmax(dim=1) for part in images.split(batch_size)])


def accuracy(model: nn.Module, images: Tensor, labels: Tensor, batch_size: int = 512) -> float:
    """The share of ``images`` that ``model`` classifies as ``labels``."""
    check_images(images, "images")
    check_labels(images, labels)
    return (predict(model, images, batch_size) == labels).float().mean().item()


class ImageClassifier(L.LightningModule):
    """An image classifier (:class:`SmallCNN` or :class:`ResNet`) trained with cross-entropy; logs ``train/loss``
    and ``{stage}/acc``.

    Args:
        in_channels, num_classes: image channels and number of classes.
        architecture: ``cnn`` or ``resnet``; width: their base width (None: 32 for ``cnn``, 16 for ``resnet``).
        optimizer: ``adam`` or ``sgd`` (momentum 0.9, the availability-attack papers' choice, with lr 0.1 and
            weight decay 5e-4).
        lr, weight_decay: optimiser settings.
    """

    def __init__(
        self,
        in_channels: PositiveInt = 1,
        num_classes: PositiveInt = 10,
        architecture: Architecture = "cnn",
        width: PositiveInt | None = None,
        optimizer: Literal["adam", "sgd"] = "adam",
        lr: PositiveFloat = 1e-3,
        weight_decay: NonNegativeFloat = 0.0,
    ) -> None:
        super().__init__()
        check_arguments(ImageClassifier.__init__, locals())
        if optimizer not in ("adam", "sgd"):
            raise ValueError(f"ImageClassifier: optimizer={optimizer!r} is invalid, expected 'adam' or 'sgd'")
        if num_classes < 2:
            raise ValueError(f"ImageClassifier: num_classes={num_classes!r} is invalid, expected an integer >= 2")
        self.save_hyperparameters()
        plain_numbers(self.hparams)
        self.net = build_classifier(architecture, in_channels, num_classes, width)

    def setup(self, stage: str) -> None:
        data = getattr(self.trainer, "datamodule", None)
        found = getattr(data, "in_channels", None) if getattr(data, "splits", None) else None
        if found is not None and found != self.hparams.in_channels:
            raise ValueError(
                f"model.init_args.in_channels={self.hparams.in_channels} but the images have {found} channels: "
                f"set --model.init_args.in_channels={found}"
            )

    def forward(self, x: Tensor) -> Tensor:
        return self.net(x)

    def training_step(self, batch: Any, batch_idx: int) -> Tensor:
        loss = F.cross_entropy(self(batch[0]), batch[1])
        self.log("train/loss", loss, prog_bar=True, batch_size=len(batch[1]))
        return loss

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        log_accuracy(self, batch, "val")

    def test_step(self, batch: Any, batch_idx: int) -> None:
        log_accuracy(self, batch, "test")

    def configure_optimizers(self) -> torch.optim.Optimizer:
        hparams = self.hparams
        if hparams.optimizer == "sgd":
            return torch.optim.SGD(self.parameters(), hparams.lr, momentum=0.9, weight_decay=hparams.weight_decay)
        return torch.optim.Adam(self.parameters(), hparams.lr, weight_decay=hparams.weight_decay)
