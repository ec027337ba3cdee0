"""LightningDataModules: tabular classification, QA (TOFU format), forget/retain pairs."""

from trustlit.data.fictitious import fictitious_qa, fictitious_split, generate_authors
from trustlit.data.forget_retain import ForgetRetainDataModule
from trustlit.data.qa import FictitiousConfig, QADataModule, load_qa_split
from trustlit.data.tabular import TabularDataModule

__all__ = [
    "FictitiousConfig",
    "ForgetRetainDataModule",
    "QADataModule",
    "TabularDataModule",
    "fictitious_qa",
    "fictitious_split",
    "generate_authors",
    "load_qa_split",
]
