"""Image metrics shared by the image families (purification, 3D scenes)."""

from __future__ import annotations

import torch


def psnr(images: torch.Tensor, references: torch.Tensor, peak: float = 1.0) -> torch.Tensor:
    """Peak signal-to-noise ratio 10 log10(peak² / MSE) in dB, per leading index (one value for [3, H, W])."""
    if images.shape != references.shape:
        raise ValueError(f"psnr: shapes differ, {list(images.shape)} vs {list(references.shape)}")
    squared = (images - references) ** 2
    mse = squared.flatten(start_dim=images.ndim - 3).mean(-1) if images.ndim > 3 else squared.mean()
    return 10 * torch.log10(peak**2 / mse.clamp_min(1e-12))
