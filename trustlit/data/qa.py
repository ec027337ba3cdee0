"""Question-answer data in TOFU's format, tokenized for causal LMs.

A *source* is one of
- a local directory of JSON Lines files, one per split (``forget10.json``, ``retain90.json``,
  ...; TOFU's layout, also ``.jsonl``), each line an object with ``question`` and ``answer``;
- a Hugging Face hub dataset id with one config per split (``locuslab/TOFU``; needs network);
- ``fictitious``: the synthetic corpus of :mod:`trustlit.data.fictitious`, generated in memory.

Every sample keeps its ``index`` in its split, so methods can weight samples by index.
The tokenizer is the LightningModule's (``module.tokenizer``) when the DataModule runs under
a Trainer; set ``datamodule.tokenizer`` to use a DataModule on its own.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import lightning as L
from torch.utils.data import DataLoader, Dataset
from transformers import PreTrainedTokenizerBase

from trustlit.data.samplers import EpochSeededSampler, ResumableDataLoader
from trustlit.fictitious import fictitious_split
from trustlit.hparams import NonNegativeInt, PositiveInt, check_arguments
from trustlit.llm.prompts import PromptFormat, collate_qa, encode_qa, resolve_prompt_format
from trustlit.paths import is_hub_id, read_utf8

FICTITIOUS = "fictitious"


@dataclass
class FictitiousConfig:
    """Size and seed of the generated corpus used when ``source: fictitious``."""

    num_authors: int = 20
    seed: int = 0
    num_perturbed: int = 3


# A datasets.Dataset of QA records. datasets is imported where records are loaded (half a second to import),
# not at module level, where reading a DataModule's signature (jsonargparse, for every recipe) would import it.
QARecords = Any


def _check_record(record: Any, where: str) -> None:
    for key in ("question", "answer"):
        if not isinstance(record, dict) or not isinstance(record.get(key), str):
            raise ValueError(f"{where}: missing or non-string '{key}'")


def _nonempty(records: QARecords, where: str) -> QARecords:
    if len(records) == 0:
        raise ValueError(f"{where}: the dataset is empty")
    return records


def read_json_records(path: Path) -> Iterator[tuple[str, Any]]:
    """``(where, record)`` of a JSON array or JSON Lines file; ``where`` names the file and row or line."""
    text = read_utf8(path)
    if text.lstrip().startswith("["):
        try:
            records = json.loads(text)
        except json.JSONDecodeError as error:
            raise ValueError(f"{path}: not a valid JSON array ({error.msg}, line {error.lineno})") from error
        for row, record in enumerate(records, start=1):
            yield f"{path}, record {row}", record
        return
    for lineno, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as error:
            raise ValueError(f"{path}:{lineno}: not valid JSON ({error.msg})") from error
        yield f"{path}:{lineno}", record


def read_jsonl(path: Path) -> list[dict]:
    """Read a QA file (JSON Lines or a JSON array); a bad record is an error that names the file and line."""
    records = []
    for where, record in read_json_records(path):
        _check_record(record, where)
        records.append(record)
    return records


def _split_file(directory: Path, split: str) -> Path:
    for suffix in (".json", ".jsonl"):
        if (candidate := directory / f"{split}{suffix}").is_file():
            return candidate
    available = sorted(p.stem for p in directory.glob("*.json*"))
    raise FileNotFoundError(f"no split '{split}' in {directory} (.json or .jsonl); available: {available}")


def check_source(source: str) -> None:
    """Fail early on a source that is neither the corpus, a directory, nor a hub id."""
    if source == FICTITIOUS or Path(source).expanduser().is_dir():
        return
    if Path(source).expanduser().exists():
        raise NotADirectoryError(f"data source {source} is a file: give the directory that holds the splits")
    if not is_hub_id(source):
        raise FileNotFoundError(f"data directory not found: {source}")


def load_qa_split(source: str, split: str, fictitious: FictitiousConfig | None = None) -> QARecords:
    """The records of one split of ``source`` (see the module docstring) as a ``datasets.Dataset``."""
    import datasets

    check_source(source)
    if source == FICTITIOUS:
        config = fictitious or FictitiousConfig()
        records = fictitious_split(split, config.num_authors, config.seed, config.num_perturbed)
        return datasets.Dataset.from_list(records)
    directory = Path(source).expanduser()
    if directory.is_dir():
        path = _split_file(directory, split)
        return _nonempty(datasets.Dataset.from_list(read_jsonl(path)), str(path))
    try:
        hub = datasets.load_dataset(source, split, split="train")
    except Exception as error:
        raise FileNotFoundError(
            f"'{source}' is not a local directory, and loading it as a hub dataset (config '{split}') failed: {error}"
        ) from error
    for row, record in enumerate(hub, start=1):
        _check_record(record, f"hub dataset {source}/{split}, row {row}")
    return _nonempty(hub, f"hub dataset {source}/{split}")


class EncodedQA(Dataset):
    """Tokenized QA samples of one split; each keeps its ``index`` and texts."""

    def __init__(
        self,
        records: QARecords,
        tokenizer: PreTrainedTokenizerBase,
        prompt_format: str,
        max_length: int,
        name: str,
    ) -> None:
        self.name = name
        self.samples = [
            {
                **encode_qa(tokenizer, r["question"], r["answer"], prompt_format, max_length),
                "index": i,
                "question": r["question"],
                "answer": r["answer"],
            }
            for i, r in enumerate(records)
        ]

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, index: int) -> dict[str, Any]:
        return self.samples[index]


class QACollator:
    """Pads samples (:func:`trustlit.llm.scoring.collate_qa`) and tags the batch with its split name."""

    def __init__(self, pad_token_id: int, split: str) -> None:
        self.pad_token_id = pad_token_id
        self.split = split

    def __call__(self, samples: list[dict[str, Any]]) -> dict[str, Any]:
        return {**collate_qa(samples, self.pad_token_id), "split": self.split}


class QADataModule(L.LightningDataModule):
    """Fine-tune on one split of a QA source and evaluate on several.

    Args:
        source: a local directory, a hub id, or ``fictitious`` (see the module docstring).
        train_split: the split trained on (TOFU: ``full`` or ``retainNN``).
        eval_splits: splits evaluated by validate/test, one dataloader each, in this order.
        batch_size: training batch size; ``eval_batch_size`` defaults to it.
        max_length: tokens per sample; longer answers are cut.
        prompt_format: ``chat`` (the tokenizer's template), ``plain`` (``Question: ... Answer:``)
            or ``auto`` (chat when the tokenizer has a template).
        max_samples: keep only the first N records of each split (quick runs).
        fictitious: the generated corpus, when ``source`` is ``fictitious``.
        seed: seeds the training order (with the epoch).
    """

    def __init__(
        self,
        source: str = FICTITIOUS,
        train_split: str | None = "retain90",
        eval_splits: list[str] | None = None,
        batch_size: PositiveInt = 8,
        eval_batch_size: PositiveInt | None = None,
        max_length: PositiveInt = 256,
        prompt_format: PromptFormat = "auto",
        max_samples: PositiveInt | None = None,
        num_workers: NonNegativeInt = 0,
        fictitious: FictitiousConfig | None = None,
        seed: int = 0,
    ) -> None:
        super().__init__()
        check_arguments(QADataModule.__init__, locals())
        self.validate_source(source)
        self.source = source
        self.train_split = train_split
        self.eval_splits = list(eval_splits) if eval_splits is not None else ["retain90", "forget10"]
        self.batch_size = batch_size
        self.eval_batch_size = eval_batch_size or batch_size
        self.max_length = max_length
        self.prompt_format = prompt_format
        self.max_samples = max_samples
        self.num_workers = num_workers
        if isinstance(fictitious, dict):  # Python callers may pass the fields directly
            fictitious = FictitiousConfig(**fictitious)
        self.fictitious = fictitious or FictitiousConfig()
        self.seed = seed
        self.tokenizer: PreTrainedTokenizerBase | None = None
        self.train_dataset: Dataset | None = None
        self.eval_datasets: list[EncodedQA] = []
        self._encoded: dict[str, EncodedQA] = {}

    def validate_source(self, source: str) -> None:
        """Fail early on a source this DataModule cannot read; a subclass with other sources overrides it."""
        check_source(source)

    def load_records(self, split: str) -> QARecords:
        """The records of one split, cut to ``max_samples``; a subclass with other sources overrides it."""
        records = load_qa_split(self.source, split, self.fictitious)
        if self.max_samples is not None:
            records = records.select(range(min(self.max_samples, len(records))))
        return records

    def resolve_tokenizer(self) -> PreTrainedTokenizerBase:
        if self.tokenizer is None:
            module = self.trainer.lightning_module if self.trainer is not None else None
            self.tokenizer = getattr(module, "tokenizer", None)
        if self.tokenizer is None:
            raise RuntimeError(
                f"{type(self).__name__} needs a tokenizer: attach it to a Trainer with a module "
                "that has `tokenizer`, or set `datamodule.tokenizer`"
            )
        return self.tokenizer

    def encode_split(self, split: str) -> EncodedQA:
        """The tokenized split, encoded once (a split often serves training and evaluation)."""
        if split not in self._encoded:
            records = self.load_records(split)
            tokenizer = self.resolve_tokenizer()
            prompt_format = resolve_prompt_format(tokenizer, self.prompt_format)
            self._encoded[split] = EncodedQA(records, tokenizer, prompt_format, self.max_length, split)
        return self._encoded[split]

    def build_train_dataset(self) -> Dataset:
        if self.train_split is None:
            raise ValueError(f"{type(self).__name__}: fit needs train_split")
        return self.encode_split(self.train_split)

    def setup(self, stage: str) -> None:
        if stage == "fit" and self.train_dataset is None:
            self.train_dataset = self.build_train_dataset()
        if not self.eval_datasets and self.eval_splits:
            self.eval_datasets = [self.encode_split(split) for split in self.eval_splits]

    def collator(self, split: str) -> QACollator:
        return QACollator(self.resolve_tokenizer().pad_token_id, split)

    def train_dataloader(self) -> DataLoader:
        dataset = self.train_dataset
        return ResumableDataLoader(
            dataset,
            batch_size=self.batch_size,
            sampler=EpochSeededSampler(len(dataset), self.seed),
            collate_fn=self.collator(self.train_split),
            num_workers=self.num_workers,
        )

    def _eval_dataloaders(self) -> list[DataLoader]:
        return [
            DataLoader(
                dataset,
                batch_size=self.eval_batch_size,
                shuffle=False,
                collate_fn=self.collator(dataset.name),
                num_workers=self.num_workers,
            )
            for dataset in self.eval_datasets
        ]

    def val_dataloader(self) -> list[DataLoader]:
        return self._eval_dataloaders()

    def test_dataloader(self) -> list[DataLoader]:
        return self._eval_dataloaders()

    def predict_dataloader(self) -> list[DataLoader]:
        return self._eval_dataloaders()
