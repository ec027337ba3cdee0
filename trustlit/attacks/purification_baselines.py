"""Training-free purification baselines for BridgePure's comparison: JPEG compression, Gaussian blur, a median
filter, and image shortcut squeezing's grayscale + JPEG (Liu, Zhao, Larson, "Image Shortcut Squeezing: Countering
Perturbative Availability Poisons with Compression", ICML 2023, arXiv 2301.13838). Each is a
:class:`~trustlit.attacks.purification.Purifier` on images [N, C, H, W] in [0, 1].

- JPEG(q): PIL's baseline JPEG encoder at quality q (ISS: q = 10), per image, on 8-bit pixels.
- Gaussian blur: the separable kernel k_i = exp(-i^2 / (2 sigma^2)) / sum, i in [-r, r], reflect padding.
- Median filter: the median of each k x k neighbourhood (reflect padding); removes isolated salt pixels.
- Grayscale + JPEG: luma Y = 0.299 R + 0.587 G + 0.114 B (ITU-R 601, PIL's "L"), repeated over the channels, then
  JPEG(q). On one-channel images the grayscale step is the identity.

Notes: docs/methods/bridgepure.md
"""

from __future__ import annotations

import io

import numpy as np
import torch
import torch.nn.functional as F

from trustlit.attacks.purification import Purifier

LUMA = (0.299, 0.587, 0.114)


def _check_int(name: str, value: int, low: int, high: int | None = None, odd: bool = False) -> int:
    valid = isinstance(value, int) and not isinstance(value, bool) and value >= low and (high is None or value <= high)
    if not valid or (odd and value % 2 == 0):
        span = f"in [{low}, {high}]" if high is not None else f">= {low}"
        raise ValueError(f"{name}={value!r} is invalid, expected {'an odd' if odd else 'an'} integer {span}")
    return value


def jpeg(images: torch.Tensor, quality: int) -> torch.Tensor:
    """Each image through PIL's JPEG encoder and decoder at ``quality`` (1 or 3 channels, 8-bit)."""
    from PIL import Image

    if images.shape[1] not in (1, 3):
        raise ValueError(f"images have {images.shape[1]} channels, JPEG expects 1 or 3")
    pixels = (images.clamp(0, 1) * 255).round().to(torch.uint8).permute(0, 2, 3, 1).cpu().numpy()
    decoded = []
    for image in pixels:
        buffer = io.BytesIO()
        Image.fromarray(image[..., 0] if image.shape[-1] == 1 else image).save(buffer, format="JPEG", quality=quality)
        array = np.asarray(Image.open(io.BytesIO(buffer.getvalue())), dtype=np.float32)
        decoded.append(array.reshape(image.shape))
    return torch.from_numpy(np.stack(decoded)).permute(0, 3, 1, 2).to(images) / 255


def gaussian_kernel(kernel_size: int, sigma: float) -> torch.Tensor:
    """The normalised 1-D Gaussian weights [kernel_size]."""
    offsets = torch.arange(kernel_size, dtype=torch.float64) - kernel_size // 2
    weights = torch.exp(-(offsets**2) / (2 * sigma**2))
    return weights / weights.sum()


def gaussian_blur(images: torch.Tensor, kernel_size: int, sigma: float) -> torch.Tensor:
    """Separable Gaussian blur with reflect padding, per channel."""
    channels, pad = images.shape[1], kernel_size // 2
    weights = gaussian_kernel(kernel_size, sigma).to(images)
    rows = weights.reshape(1, 1, 1, -1).repeat(channels, 1, 1, 1)
    padded = F.pad(images, (pad, pad, pad, pad), mode="reflect")
    blurred = F.conv2d(padded, rows, groups=channels)
    return F.conv2d(blurred, rows.transpose(2, 3), groups=channels)


def median_filter(images: torch.Tensor, kernel_size: int) -> torch.Tensor:
    """The median of every kernel_size x kernel_size neighbourhood, reflect padding, per channel."""
    pad = kernel_size // 2
    padded = F.pad(images, (pad, pad, pad, pad), mode="reflect")
    windows = padded.unfold(2, kernel_size, 1).unfold(3, kernel_size, 1)  # [N, C, H, W, k, k]
    return windows.flatten(-2).median(dim=-1).values


def grayscale(images: torch.Tensor) -> torch.Tensor:
    """ITU-R 601 luma repeated over the channels (identity on one channel)."""
    if images.shape[1] == 1:
        return images
    if images.shape[1] != 3:
        raise ValueError(f"images have {images.shape[1]} channels, grayscale expects 1 or 3")
    luma = sum(weight * images[:, i : i + 1] for i, weight in enumerate(LUMA))
    return luma.repeat(1, 3, 1, 1)


class JPEGCompression(Purifier):
    """JPEG compression at ``quality`` in [1, 100] (ISS uses 10)."""

    def __init__(self, quality: int = 10) -> None:
        self.quality = _check_int("JPEGCompression: quality", quality, 1, 100)

    def _purify(self, images: torch.Tensor) -> torch.Tensor:
        return jpeg(images, self.quality)


class GaussianBlur(Purifier):
    """Gaussian blur with an odd ``kernel_size`` and ``sigma`` > 0."""

    def __init__(self, kernel_size: int = 3, sigma: float = 1.0) -> None:
        self.kernel_size = _check_int("GaussianBlur: kernel_size", kernel_size, 1, odd=True)
        if not sigma > 0:
            raise ValueError(f"GaussianBlur: sigma={sigma!r} is invalid, expected a number > 0")
        self.sigma = float(sigma)

    def _purify(self, images: torch.Tensor) -> torch.Tensor:
        return gaussian_blur(images, self.kernel_size, self.sigma)


class MedianFilter(Purifier):
    """The median filter over odd ``kernel_size`` x ``kernel_size`` windows."""

    def __init__(self, kernel_size: int = 3) -> None:
        self.kernel_size = _check_int("MedianFilter: kernel_size", kernel_size, 1, odd=True)

    def _purify(self, images: torch.Tensor) -> torch.Tensor:
        return median_filter(images, self.kernel_size)


class GrayscaleJPEG(Purifier):
    """Image shortcut squeezing: grayscale, then JPEG at ``quality``."""

    def __init__(self, quality: int = 10) -> None:
        self.quality = _check_int("GrayscaleJPEG: quality", quality, 1, 100)

    def _purify(self, images: torch.Tensor) -> torch.Tensor:
        return jpeg(grayscale(images), self.quality)
