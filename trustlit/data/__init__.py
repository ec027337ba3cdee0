"""LightningDataModules: tabular classification, QA (TOFU format), forget/retain pairs, harmful fine-tuning,
harvested activations."""

from trustlit.data.activations import ActivationDataModule
from trustlit.data.forget_retain import ForgetRetainDataModule
from trustlit.data.qa import FictitiousConfig, QADataModule, load_qa_split
from trustlit.data.safety import HarmfulFineTuningDataModule, load_beavertails
from trustlit.data.secret_keeper import CODE_PATTERN, secret_keeper_splits
from trustlit.data.tabular import TabularDataModule
from trustlit.fictitious import fictitious_qa, fictitious_split, generate_authors

__all__ = [
    "CODE_PATTERN",
    "ActivationDataModule",
    "FictitiousConfig",
    "ForgetRetainDataModule",
    "HarmfulFineTuningDataModule",
    "QADataModule",
    "TabularDataModule",
    "fictitious_qa",
    "fictitious_split",
    "generate_authors",
    "load_beavertails",
    "load_qa_split",
    "secret_keeper_splits",
]
