"""Differential privacy: DP-SGD for any LightningModule, private multi-class SVMs, mechanisms."""

from trustlit.per_sample import PerSampleLossModule
from trustlit.privacy.dpsgd import DPSGD
from trustlit.privacy.mechanisms import analytic_gaussian_sigma, classic_gaussian_sigma
from trustlit.privacy.pmsvm import PMSVM

__all__ = ["DPSGD", "PMSVM", "PerSampleLossModule", "analytic_gaussian_sigma", "classic_gaussian_sigma"]
