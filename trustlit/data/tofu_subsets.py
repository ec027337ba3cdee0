"""Author subsets of TOFU: a smaller TOFU protocol with the same structure (e.g. "TOFU-20").

TOFU (Maini et al., 2024, arXiv 2401.06121) holds 200 fictitious authors with 20 QA pairs each,
stored author by author in ``full.json``: author a owns records 20a .. 20a + 19. Its forget splits
are the last authors (``forget01``: 2 authors, ``forget05``: 10, ``forget10``: 20) and its
``retain_perturbed`` evaluation split covers the first 20 authors.

:func:`write_tofu_subset` keeps the forget split's authors and ``num_retain_authors`` authors of
``retain_perturbed``, and writes a TOFU-shaped directory that every trustlit QA DataModule reads as
its ``source``:

- ``full.json``: every QA pair of the kept authors (the target model trains on it);
- ``retain.json``: the retain authors' QA pairs (the retain model trains on it);
- ``<forget>.json`` and ``<forget>_perturbed.json``: the forget split, unchanged;
- ``retain_perturbed.json``: the retain authors' records of TOFU's ``retain_perturbed``;
- ``real_authors_perturbed.json``, ``world_facts_perturbed.json``, ``idontknow.jsonl``: unchanged;
- ``subset.json``: which authors, how many records per file, and where they came from.

With 18 retain authors and ``forget01`` this is the 20-author, 400-QA "TOFU-20" of the unlearning
benchmark (``benchmarks/unlearning.py``), which fine-tunes and unlearns on two CPU cores.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from trustlit.data.qa import read_jsonl
from trustlit.paths import atomic_directory, write_json_atomic

QA_PER_AUTHOR = 20
NUM_AUTHORS = 200
FORGET_SPLITS = ("forget01", "forget05", "forget10")
UNCHANGED_FILES = ("real_authors_perturbed.json", "world_facts_perturbed.json", "idontknow.jsonl")


@dataclass(frozen=True)
class TofuSubset:
    """What :func:`write_tofu_subset` wrote: the authors (indices in ``full.json``) and the record counts."""

    forget_split: str
    forget_authors: tuple[int, ...]
    retain_authors: tuple[int, ...]
    counts: dict[str, int]


def _key(record: dict) -> tuple[str, str]:
    return record["question"], record["answer"]


def authors_of(records: Sequence[dict], full: Sequence[dict], what: str) -> list[int]:
    """The author of each record: the position of its (question, answer) in ``full`` divided by 20.

    A record that ``full`` lacks is an error naming ``what``; TOFU repeats one question with two
    answers, so the pair and not the question identifies a record.
    """
    positions: dict[tuple[str, str], int] = {}
    for index, record in enumerate(full):
        positions.setdefault(_key(record), index)
    missing = [record["question"] for record in records if _key(record) not in positions]
    if missing:
        raise ValueError(f"{what}: {len(missing)} records are not in TOFU's full.json, e.g. {missing[0]!r}")
    return [positions[_key(record)] // QA_PER_AUTHOR for record in records]


def _records(tofu_dir: Path, name: str) -> list[dict]:
    path = tofu_dir / name
    if not path.is_file():
        raise FileNotFoundError(f"TOFU file not found: {path} (a TOFU directory holds full.json, forget01.json, ...)")
    return read_jsonl(path)


def write_tofu_subset(
    tofu_dir: Path | str, output_dir: Path | str, forget_split: str = "forget01", num_retain_authors: int = 18
) -> TofuSubset:
    """Write the subset of ``tofu_dir`` with ``forget_split``'s authors and ``num_retain_authors`` retain authors.

    The retain authors are the first ``num_retain_authors`` authors of ``retain_perturbed`` (so that
    Model Utility's truth ratios exist for each of them). The directory is written whole or not at
    all; an existing ``output_dir`` is replaced.
    """
    tofu_dir, output_dir = Path(tofu_dir), Path(output_dir)
    if forget_split not in FORGET_SPLITS:
        raise ValueError(f"forget_split must be one of {FORGET_SPLITS}, got {forget_split!r}")
    full = _records(tofu_dir, "full.json")
    forget = _records(tofu_dir, f"{forget_split}.json")
    forget_perturbed = _records(tofu_dir, f"{forget_split}_perturbed.json")
    retain_perturbed = _records(tofu_dir, "retain_perturbed.json")
    forget_authors = sorted(set(authors_of(forget, full, f"{forget_split}.json")))
    evaluated = authors_of(retain_perturbed, full, "retain_perturbed.json")
    candidates = [a for a in dict.fromkeys(evaluated) if a not in forget_authors]
    if not 1 <= num_retain_authors <= len(candidates):
        raise ValueError(
            f"num_retain_authors must be in [1, {len(candidates)}] (the authors of retain_perturbed), "
            f"got {num_retain_authors}"
        )
    retain_authors = sorted(candidates[:num_retain_authors])
    by_author = authors_of(full, full, "full.json")
    kept = set(forget_authors) | set(retain_authors)
    files = {
        "full.json": [r for r, a in zip(full, by_author, strict=True) if a in kept],
        "retain.json": [r for r, a in zip(full, by_author, strict=True) if a in retain_authors],
        f"{forget_split}.json": forget,
        f"{forget_split}_perturbed.json": forget_perturbed,
        "retain_perturbed.json": [r for r, a in zip(retain_perturbed, evaluated, strict=True) if a in retain_authors],
    }
    subset = TofuSubset(
        forget_split,
        tuple(forget_authors),
        tuple(retain_authors),
        {name: len(records) for name, records in files.items()},
    )
    with atomic_directory(output_dir) as scratch:
        for name, records in files.items():
            (scratch / name).write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
        for name in UNCHANGED_FILES:
            shutil.copyfile(tofu_dir / name, scratch / name)
        write_json_atomic(scratch / "subset.json", {**asdict(subset), "source": str(tofu_dir)})
    return subset
