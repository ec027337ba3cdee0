"""Differential privacy: DP-SGD for any LightningModule, private multi-class SVMs, mechanisms."""

from trustlit.privacy.dpsgd import DPSGD, PerSampleLossModule

__all__ = ["DPSGD", "PerSampleLossModule"]
