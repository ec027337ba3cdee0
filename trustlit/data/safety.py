"""Data for defenses against harmful fine-tuning: alignment set, fine-tuning mixture, harmful set, tests.

A *source* is one of

- ``secret-keeper``: the generated benchmark of :mod:`trustlit.data.secret_keeper` (no files);
- a directory (bring your own data) holding
  ``beavertails.json`` (or ``.jsonl``): BeaverTails records (``prompt``, ``response``, ``is_safe``,
  optional ``category``), a JSON array or JSON Lines. The unsafe records, in file order, give
  ``harmful_test`` (the first ``num_test``), ``harmful`` (the next ``num_harmful``) and the harmful
  part of the mixture (the next ``round(harmful_ratio * num_finetune)``); the safe records give the
  alignment set ``align`` (the first ``num_align``; none: no alignment set);
  ``task.json`` (or ``.jsonl``): the user's task, records with ``question``, ``answer`` and an
  optional numeric ``label`` (else the answer's number, :func:`~trustlit.answers.extract_final_answer`).
  The first ``num_test`` give ``task_test``, the next ones the benign part of the mixture.

Every record becomes ``{"question", "answer", "harmful", "label"}``; ``harmful`` says whether the
pair itself is harmful (BeaverTails: not ``is_safe``; secret-keeper: a leaked code).

A training batch is ``{"finetune": batch, "align": batch, "harmful": batch}``, each part in the
format of :func:`trustlit.llm.scoring.collate_qa` plus ``"harmful"`` (bool [B], per sample) and ``"split"``;
``"index"`` is each sample's index in its own split (BDS keeps per-sample weights of the mixture by
it). An epoch is one pass over the ``stage`` set (``finetune`` or ``align``) in a random order; the
other parts are drawn alongside from fresh permutations of their sets, cycled when smaller. All
orders depend only on (seed, epoch) and the loader resumes mid-epoch
(:class:`~trustlit.data.samplers.ResumableDataLoader`). A part whose set is empty (a directory
without safe records has no alignment set) is left out of the batch: ``available_parts`` lists the
parts present, so that a method can refuse a source that lacks the part it needs.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path
from types import UnionType
from typing import Any, Literal

import torch
from lightning.pytorch.utilities import move_data_to_device
from torch.utils.data import DataLoader, Dataset

from trustlit.answers import extract_final_answer
from trustlit.data.qa import EncodedQA, QACollator, QADataModule, QARecords, read_json_records
from trustlit.data.samplers import PartSampler, ResumableDataLoader
from trustlit.data.secret_keeper import SPLITS, check_mixture_args, secret_keeper_splits, split_record
from trustlit.hparams import NonNegativeInt, PositiveInt
from trustlit.llm.prompts import PromptFormat

SECRET_KEEPER = "secret-keeper"
BEAVERTAILS_FILE = "beavertails"
TASK_FILE = "task"
PARTS = ("finetune", "align", "harmful")
STAGES = ("finetune", "align")


# --------------------------------------------------------------------------- reading files


def _require(record: Any, where: str, key: str, kind: type | UnionType, kind_name: str) -> Any:
    value = record.get(key) if isinstance(record, dict) else None
    if not isinstance(value, kind) or (kind is not bool and isinstance(value, bool)):
        raise ValueError(f"{where}: missing or non-{kind_name} '{key}'")
    return value


def load_beavertails(path: str | Path) -> list[dict]:
    """BeaverTails records (``prompt``, ``response``, ``is_safe``, optional ``category``), checked."""
    path = Path(path).expanduser()
    if not path.is_file():
        raise FileNotFoundError(f"BeaverTails file not found: {path}")
    records = []
    for where, record in read_json_records(path):
        _require(record, where, "prompt", str, "string")
        _require(record, where, "response", str, "string")
        _require(record, where, "is_safe", bool, "boolean")
        category = record.get("category", {})
        if not isinstance(category, dict) or not all(
            isinstance(k, str) and isinstance(v, bool) for k, v in category.items()
        ):
            raise ValueError(f"{where}: 'category' must map category names to booleans")
        records.append(record)
    return records


def _task_label(record: dict, where: str) -> int | float:
    if record.get("label") is not None:
        return _require(record, where, "label", int | float, "numeric")
    number = extract_final_answer(record["answer"])
    if number is None:
        raise ValueError(f"{where}: no 'label' and no number in 'answer' to take it from")
    return float(number) if "." in number else int(number)


def load_task(path: Path) -> list[dict]:
    """The user's task records (``question``, ``answer``, optional numeric ``label``) as split records."""
    records = []
    for where, record in read_json_records(path):
        question = _require(record, where, "question", str, "string")
        answer = _require(record, where, "answer", str, "string")
        records.append(split_record(question, answer, harmful=False, label=_task_label(record, where)))
    return records


def data_file(directory: Path, stem: str) -> Path:
    """``<stem>.json`` or ``<stem>.jsonl`` in a bring-your-own directory; missing: an error naming both."""
    for suffix in (".json", ".jsonl"):
        if (candidate := directory / f"{stem}{suffix}").is_file():
            return candidate
    raise FileNotFoundError(
        f"{directory / stem}.json (or .jsonl) not found: a harmful fine-tuning data directory holds "
        f"{BEAVERTAILS_FILE}.json[l] (prompt, response, is_safe) and {TASK_FILE}.json[l] (question, answer[, label])"
    )


def _check_enough(path: Path, records: list[dict], kind: str, needs: dict[str, int]) -> None:
    if len(records) < sum(needs.values()):
        wanted = " + ".join(f"{key} {value}" for key, value in needs.items())
        raise ValueError(f"{path} has {len(records)} {kind} records; {sum(needs.values())} are needed ({wanted})")


def directory_splits(
    directory: str | Path,
    seed: int = 0,
    num_align: int = 1000,
    num_finetune: int = 1000,
    harmful_ratio: float = 0.1,
    num_harmful: int = 200,
    num_test: int = 100,
) -> dict[str, list[dict]]:
    """The splits of a bring-your-own directory (see the module docstring); the mixture shuffled by ``seed``."""
    check_mixture_args(
        harmful_ratio,
        {"num_align": num_align, "num_finetune": num_finetune, "num_harmful": num_harmful, "num_test": num_test},
    )
    directory = Path(directory).expanduser()
    beavertails_path, task_path = data_file(directory, BEAVERTAILS_FILE), data_file(directory, TASK_FILE)
    beavertails = load_beavertails(beavertails_path)
    unsafe = [split_record(r["prompt"], r["response"], harmful=True) for r in beavertails if not r["is_safe"]]
    safe = [split_record(r["prompt"], r["response"], harmful=False) for r in beavertails if r["is_safe"]]
    task = load_task(task_path)
    num_leaks = round(harmful_ratio * num_finetune)
    _check_enough(
        beavertails_path,
        unsafe,
        "unsafe (is_safe false)",
        {"num_test": num_test, "num_harmful": num_harmful, "round(harmful_ratio * num_finetune)": num_leaks},
    )
    _check_enough(
        task_path, task, "task", {"num_test": num_test, "benign part of the mixture": num_finetune - num_leaks}
    )
    start = num_test + num_harmful
    finetune = unsafe[start : start + num_leaks] + task[num_test : num_test + num_finetune - num_leaks]
    random.Random(seed).shuffle(finetune)
    return {
        "align": safe[:num_align],
        "finetune": finetune,
        "harmful": unsafe[num_test : num_test + num_harmful],
        "harmful_test": unsafe[:num_test],
        "task_test": task[:num_test],
    }


# --------------------------------------------------------------------------- batches


class PartsDataset(Dataset):
    """Indexed by one index per part, as :class:`PartSampler` yields them; the first part sets the length."""

    def __init__(self, parts: dict[str, EncodedQA]) -> None:
        self.parts = parts

    def __len__(self) -> int:
        return len(next(iter(self.parts.values())))

    def __getitem__(self, indices: tuple[int, ...]) -> dict[str, Any]:
        return {name: split[i] for (name, split), i in zip(self.parts.items(), indices, strict=True)}


class FlaggedCollator(QACollator):
    """:class:`~trustlit.data.qa.QACollator` plus ``"harmful"``: each sample's flag, looked up by its index."""

    def __init__(self, pad_token_id: int, split: str, flags: torch.Tensor) -> None:
        super().__init__(pad_token_id, split)
        self.flags = flags

    def __call__(self, samples: list[dict[str, Any]]) -> dict[str, Any]:
        batch = super().__call__(samples)
        return {**batch, "harmful": self.flags[batch["index"]]}


class PartsCollator:
    """Collates every part of the samples with that part's collator."""

    def __init__(self, collators: dict[str, FlaggedCollator]) -> None:
        self.collators = collators

    def __call__(self, samples: list[dict[str, Any]]) -> dict[str, Any]:
        return {part: collate([s[part] for s in samples]) for part, collate in self.collators.items()}


class HarmfulFineTuningDataModule(QADataModule):
    """Alignment set, fine-tuning mixture with harmful share p, harmful set, and held-out tests.

    Args:
        source: ``secret-keeper`` or a bring-your-own directory (see the module docstring).
        harmful_ratio: the share p in [0, 1] of harmful samples in the fine-tuning mixture.
        num_finetune, num_align, num_harmful, num_test: sizes of the mixture, the alignment set,
            the harmful set and each test split (Panacea's defaults: 1000 fine-tuning samples, p = 0.1).
        stage: the set one epoch iterates over: ``finetune`` (the user's fine-tuning) or ``align``
            (the alignment stage of Vaccine, Booster, RepNoise).
        eval_splits: splits evaluated by validate/test/predict, one dataloader each.
        Other arguments: see :class:`~trustlit.data.qa.QADataModule`; ``batch_size`` is the size of each part.
    """

    def __init__(
        self,
        source: str = SECRET_KEEPER,
        harmful_ratio: float = 0.1,
        num_finetune: int = 1000,
        num_align: int = 1000,
        num_harmful: int = 200,
        num_test: int = 100,
        stage: Literal["finetune", "align"] = "finetune",
        batch_size: PositiveInt = 8,
        eval_batch_size: PositiveInt | None = None,
        max_length: PositiveInt = 128,
        prompt_format: PromptFormat = "auto",
        seed: int = 0,
        num_workers: NonNegativeInt = 0,
        eval_splits: list[str] | None = None,
    ) -> None:
        sizes = {"num_align": num_align, "num_finetune": num_finetune, "num_harmful": num_harmful, "num_test": num_test}
        check_mixture_args(harmful_ratio, sizes)
        if stage not in STAGES:
            raise ValueError(f"stage must be one of {STAGES}, got '{stage}'")
        eval_splits = ["harmful_test", "task_test"] if eval_splits is None else list(eval_splits)
        if unknown := [split for split in eval_splits if split not in SPLITS]:
            raise ValueError(f"eval_splits {unknown} unknown: valid splits are {SPLITS}")
        super().__init__(
            source=source,
            train_split=stage,
            eval_splits=eval_splits,
            batch_size=batch_size,
            eval_batch_size=eval_batch_size,
            max_length=max_length,
            prompt_format=prompt_format,
            num_workers=num_workers,
            seed=seed,
        )
        self.harmful_ratio = harmful_ratio
        self.sizes = sizes
        self.stage = stage
        self._splits: dict[str, list[dict]] | None = None

    def validate_source(self, source: str) -> None:
        if source == SECRET_KEEPER:
            return
        directory = Path(source).expanduser()
        if not directory.is_dir():
            raise FileNotFoundError(
                f"data source {source} is neither '{SECRET_KEEPER}' nor a directory "
                f"(with {BEAVERTAILS_FILE}.json[l] and {TASK_FILE}.json[l])"
            )
        for stem in (BEAVERTAILS_FILE, TASK_FILE):
            data_file(directory, stem)

    # ------------------------------------------------------------------ records

    def split_records(self, name: str) -> list[dict]:
        """The raw records of split ``name`` (``question``, ``answer``, ``harmful``, ``label``), built once."""
        if name not in SPLITS:
            raise ValueError(f"unknown split '{name}': valid splits are {SPLITS}")
        if self._splits is None and self.source == SECRET_KEEPER:
            self._splits = secret_keeper_splits(self.seed, harmful_ratio=self.harmful_ratio, **self.sizes)
        elif self._splits is None:
            self._splits = directory_splits(self.source, self.seed, harmful_ratio=self.harmful_ratio, **self.sizes)
        return self._splits[name]

    @property
    def available_parts(self) -> tuple[str, ...]:
        """The training-batch parts whose sets are not empty, in the order of ``PARTS``."""
        return tuple(part for part in PARTS if self.split_records(part))

    @property
    def finetune_size(self) -> int:
        """The number of samples in the fine-tuning mixture (BDS keeps one weight per sample)."""
        return len(self.split_records("finetune"))

    def harmful_flags(self, split: str) -> torch.Tensor:
        """bool [N]: which samples of ``split`` are harmful, by index."""
        return torch.tensor([r["harmful"] for r in self.split_records(split)], dtype=torch.bool)

    @property
    def finetune_harmful(self) -> torch.Tensor:
        """bool [N]: which samples of the fine-tuning mixture are harmful (the ground truth of a weight AUROC)."""
        return self.harmful_flags("finetune")

    def finetune_batches(self, device: torch.device | str = "cpu") -> Iterator[dict[str, Any]]:
        """The whole fine-tuning mixture in index order, in batches of ``eval_batch_size`` on ``device``
        (to score every sample, e.g. BDS's weights)."""
        loader = DataLoader(
            self.encode_split("finetune"),
            batch_size=self.eval_batch_size,
            shuffle=False,
            collate_fn=self.collator("finetune"),
        )
        for batch in loader:
            yield move_data_to_device(batch, device)

    def load_records(self, split: str) -> QARecords:
        import datasets

        records = self.split_records(split)
        if not records:
            raise ValueError(f"split '{split}' of data source {self.source} is empty")
        return datasets.Dataset.from_list([{"question": r["question"], "answer": r["answer"]} for r in records])

    # ------------------------------------------------------------------ loaders

    def collator(self, split: str) -> FlaggedCollator:
        return FlaggedCollator(self.resolve_tokenizer().pad_token_id, split, self.harmful_flags(split))

    def build_train_dataset(self) -> PartsDataset:
        parts = self.available_parts
        if self.stage not in parts:
            raise ValueError(
                f"stage '{self.stage}' iterates the {self.stage} set, but data source {self.source} has none"
            )
        order = [self.stage, *(part for part in parts if part != self.stage)]
        return PartsDataset({part: self.encode_split(part) for part in order})

    def train_dataloader(self) -> DataLoader:
        parts = self.train_dataset
        sampler = PartSampler([len(split) for split in parts.parts.values()], self.seed)
        collate = PartsCollator({part: self.collator(part) for part in parts.parts})
        return ResumableDataLoader(
            parts, batch_size=self.batch_size, sampler=sampler, collate_fn=collate, num_workers=self.num_workers
        )
