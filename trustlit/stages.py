"""Cached stages of a long pipeline: a benchmark that spans sessions resumes where it stopped.

A stage is a named step with a JSON configuration, e.g. ``finetune/target-full`` with its learning
rate and epochs. :meth:`StageCache.run` computes it once and keeps, in ``<root>/<name>/``, what the
computation wrote (checkpoints, evaluation files) and ``stage.json``: its configuration, its JSON
result, and how it was made (command, start date, wall time, machine, versions). Running the stage
again returns the stored result without recomputing it while the configuration is the same; a
changed configuration recomputes it and replaces the old one.

A stage computes into a temporary sibling directory that replaces ``<root>/<name>/`` only when it
has finished (:func:`~trustlit.paths.atomic_directory`), so an interrupted stage leaves nothing that
a later run could mistake for a result; what a killed run left there is removed when the stage runs
again. One process at a time works on a cache.

With ``records=``, each stage's record (and the small files named in ``keep``) is also written to
``<records>/<name>/``, a directory meant to be committed: a new checkout then knows every finished
stage's result without its large files (checkpoints). A stage whose files a later stage needs
(``files=True``) but that a checkout lacks is computed again; its record keeps the first result and
lists the new one under ``recomputed``, so that a reproduction that drifted shows; the result keys named in
``reproduce`` must come out the same (numbers to a relative 1e-6), or the stage fails and keeps its first files, since
the later stages were computed from them (a bf16 fine-tune on another CPU, for one, need not give the same weights).
Where the kept files suffice to rebuild the large ones (a LoRA fine-tune's adapters, its checkpoint), a ``restore``
function rebuilds them instead of computing the stage again; its result is checked the same way.
"""

from __future__ import annotations

import hashlib
import json
import math
import platform
import shlex
import shutil
import sys
import time
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import torch

from trustlit.hardware import machine
from trustlit.paths import TEMP_SUFFIX, atomic_directory, write_json_atomic

RECORD_NAME = "stage.json"


def utc_date() -> str:
    """Now, as ``date -u`` writes it."""
    return datetime.now(timezone.utc).strftime("%a %b %d %H:%M:%S UTC %Y")


def config_digest(config: Mapping[str, Any]) -> str:
    """A stable hash of a JSON configuration (key order does not matter)."""
    return hashlib.sha256(json.dumps(config, sort_keys=True).encode()).hexdigest()[:16]


def tensors_digest(tensors: Mapping[str, torch.Tensor]) -> str:
    """A hash of named tensors, bit for bit (names, dtypes, shapes and bytes): a fingerprint of a model's weights."""
    digest = hashlib.sha256()
    for name, tensor in sorted(tensors.items()):
        digest.update(f"{name}:{tensor.dtype}:{tuple(tensor.shape)}".encode())
        digest.update(tensor.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()[:16]


class StageCache:
    """Stages under ``root``, each computed once per configuration.

    Args:
        root: the directory that holds one subdirectory per stage (names may contain ``/``).
        command: the command recorded with each stage; default this process's command line.
        records: where records (and kept files) also go, to be committed; None keeps them in ``root`` only.
    """

    def __init__(self, root: Path | str, command: str | None = None, records: Path | str | None = None) -> None:
        self.root = Path(root)
        self.command = command or shlex.join([sys.executable, *sys.argv])
        self.records = Path(records) if records is not None else None

    def path(self, name: str) -> Path:
        """The directory of stage ``name`` (what its computation wrote lies here once it finished)."""
        if not name or name.startswith("/") or ".." in Path(name).parts:
            raise ValueError(f"stage name must be a relative path without '..', got {name!r}")
        return self.root / name

    def record_directory(self, name: str) -> Path:
        """Where the record of stage ``name`` is read from: ``records`` if set, else the stage's directory."""
        directory = self.path(name)  # checks the name
        return self.records / name if self.records is not None else directory

    def record(self, name: str) -> dict[str, Any] | None:
        """The stored record of stage ``name``, or None if it never finished."""
        return _read_record(self.record_directory(name))

    def file(self, name: str, filename: str) -> Path:
        """A file stage ``name`` wrote: the kept copy beside its record if there is one, else in its directory."""
        kept = self.record_directory(name) / filename
        return kept if kept.is_file() else self.path(name) / filename

    def done(self, name: str, config: Mapping[str, Any]) -> bool:
        """Whether stage ``name`` finished with this configuration."""
        return _matches(self.record(name), _checked(name, config))

    def has_files(self, name: str, config: Mapping[str, Any]) -> bool:
        """Whether this checkout holds the files stage ``name`` wrote with this configuration."""
        return _matches(_read_record(self.path(name)), _checked(name, config))

    def restorable(self, name: str, keep: tuple[str, ...]) -> bool:
        """Whether the files ``keep`` lie beside the record of stage ``name``, so a restore can rebuild from them."""
        kept = self.record_directory(name)
        return bool(keep) and all((kept / filename).is_file() for filename in keep)

    def run(
        self,
        name: str,
        config: Mapping[str, Any],
        compute: Callable[[Path], Any],
        *,
        files: bool = False,
        keep: tuple[str, ...] = (),
        reproduce: tuple[str, ...] = (),
        restore: Callable[[Path, Path], Mapping[str, Any]] | None = None,
    ) -> Any:
        """The result of stage ``name``: stored if it finished with ``config``, else ``compute(directory)``.

        ``compute`` writes its files into the directory it is given and returns a JSON-serialisable
        result; on success the directory becomes :meth:`path` (replacing an older configuration's).
        ``files``: the caller needs those files, so a recorded stage whose files this checkout lacks is
        computed again (and keeps its first result). ``keep``: files copied beside the committed record.
        ``reproduce``: keys of the result that such a recomputation must give again (see
        :func:`check_reproduced`), else :class:`StageNotReproduced` is raised and nothing is replaced.
        ``restore(directory, kept)``: instead of computing a recorded stage again, rebuild its files into
        ``directory`` from the files kept beside its record (in ``kept``, all of ``keep`` there) and return the
        ``reproduce`` keys that the rebuilt files give (at least one), which must equal the recorded ones.
        """
        config = _checked(name, config)
        recorded = self.record(name) if self.done(name, config) else None
        if recorded is not None and (not files or self.has_files(name, config)):
            return recorded["result"]
        kept = self.record_directory(name)
        restoring = recorded is not None and restore is not None and self.restorable(name, keep)
        final = self.path(name)
        for stale in final.parent.glob(f".{final.name}.*{TEMP_SUFFIX}"):  # what a killed run of this stage left
            shutil.rmtree(stale)
        with atomic_directory(final) as scratch:
            started, began = utc_date(), time.perf_counter()
            result = restore(scratch, kept) if restoring else compute(scratch)
            if restoring:
                check_reproduced(name, recorded, result, restored_keys(name, result, reproduce))
            elif recorded is not None:
                check_reproduced(name, recorded, result, reproduce)
            made = {
                "result": result,
                "command": self.command,
                "started": started,
                "wall_seconds": time.perf_counter() - began,
                "machine": machine(),
                "versions": f"Python {platform.python_version()}, torch {torch.__version__}",
                **({"restored": f"from the kept {', '.join(keep)}"} if restoring else {}),
            }
            if recorded is None:
                record = {"name": name, "config": config, "config_digest": config_digest(config), **made}
            else:
                record = {**recorded, "recomputed": [*recorded.get("recomputed", []), made]}
            write_json_atomic(scratch / RECORD_NAME, record)
            if self.records is not None:
                self._commit(name, scratch, record, keep, first=recorded is None)
        return record["result"]

    def _commit(self, name: str, scratch: Path, record: dict[str, Any], keep: tuple[str, ...], first: bool) -> None:
        directory = self.records / name
        directory.mkdir(parents=True, exist_ok=True)
        # a recomputation keeps the committed files (they belong to the first result) and adds those a record made
        # before they were kept lacks: it reproduced the first result, so its files are the first result's
        for filename in keep if first else [f for f in keep if not (directory / f).is_file()]:
            if not (scratch / filename).is_file():
                raise FileNotFoundError(f"stage {name!r}: the file to keep, {filename!r}, was not written")
            shutil.copyfile(scratch / filename, directory / filename)
        write_json_atomic(directory / RECORD_NAME, record)  # last: a record means its kept files are there


class StageNotReproduced(RuntimeError):
    """A recomputed stage whose result differs from its record: the stages after it used the recorded files."""


def check_reproduced(name: str, recorded: Mapping[str, Any], result: Mapping[str, Any], keys: tuple[str, ...]) -> None:
    """Raise :class:`StageNotReproduced` if ``result`` differs from the recorded result on one of ``keys``
    (numbers to a relative 1e-6, anything else exactly); a key the record lacks, as in a record made before the
    key was added, cannot be compared and is passed over."""
    if (key := first_difference(recorded["result"], result, keys)) is not None:
        raise StageNotReproduced(
            f"stage {name!r} recomputed on {machine()} gives {key} = {result[key]!r}, its record (made on "
            f"{recorded['machine']}) {recorded['result'][key]!r}: the later stages were computed from the recorded "
            "files, so this machine cannot extend this cache; run on the recorded kind of machine, or start a fresh "
            "work directory and records folder"
        )


def first_difference(first: Mapping[str, Any], again: Mapping[str, Any], keys: Iterable[str]) -> str | None:
    """The first of ``keys`` on which ``again`` differs from ``first`` (numbers to a relative 1e-6, anything else
    exactly), or None; a key ``first`` lacks is passed over."""
    for key in keys:
        if key not in first:
            continue
        numbers = all(isinstance(v, (int, float)) for v in (first[key], again[key]))
        same = (
            math.isclose(first[key], again[key], rel_tol=1e-6, abs_tol=1e-12) if numbers else first[key] == again[key]
        )
        if not same:
            return key
    return None


def restored_keys(name: str, result: Mapping[str, Any], reproduce: tuple[str, ...]) -> tuple[str, ...]:
    """The ``reproduce`` keys a restored stage's result gives: at least one, or nothing would be checked."""
    keys = tuple(key for key in reproduce if key in result)
    if not keys:
        raise ValueError(
            f"stage {name!r}: a restore must give one of {list(reproduce)} to check (it gave {list(result)})"
        )
    return keys


def _read_record(directory: Path) -> dict[str, Any] | None:
    path = directory / RECORD_NAME
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None


def _matches(record: dict[str, Any] | None, config: dict[str, Any]) -> bool:
    return record is not None and record["config_digest"] == config_digest(config)


def _checked(name: str, config: Mapping[str, Any]) -> dict[str, Any]:
    try:
        return json.loads(json.dumps(dict(config)))
    except TypeError as error:
        raise ValueError(f"stage {name!r}: its configuration must be JSON-serialisable ({error})") from error
