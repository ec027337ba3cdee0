"""Names of local files and hub resources, reading text files, and writing files without half-writing them."""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

TEMP_SUFFIX = ".tmp"  # what an interrupted atomic write leaves behind: .<name>.<random>.tmp
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


def read_utf8(path: Path) -> str:
    """The text of ``path``; a file that is not UTF-8 is an error naming the file and the byte offset."""
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as error:
        raise ValueError(
            f"{path}: not UTF-8 text (byte {error.start}: {error.reason}); re-encode it as UTF-8"
        ) from error


def existing_file(path: str | Path, what: str) -> Path:
    """``path`` (``~`` expanded) when it names a file; else a one-line FileNotFoundError naming ``what``
    (the argument, e.g. ``embeddings_path``) and the path as given."""
    file = Path(path).expanduser()
    if not file.is_file():
        raise FileNotFoundError(f"{what}={str(path)!r}: no such file")
    return file


def is_hub_id(name: str) -> bool:
    """``owner/name`` as the Hugging Face hub spells it (a relative path like ``data/tofu`` also matches:
    callers check for a local path first)."""
    return _HUB_ID.match(name) is not None


def current_umask() -> int:
    """The process's umask (read by setting it and putting it back)."""
    mask = os.umask(0)
    os.umask(mask)
    return mask


@contextmanager
def atomic_path(path: Path) -> Iterator[Path]:
    """A temporary path in ``path``'s own directory to write to: renamed onto ``path`` when the block ends
    without error, removed otherwise, so readers see the old file or the new one and never half of one
    (a temporary file in ``$TMPDIR`` moved across filesystems would not be atomic on cluster storage)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    descriptor, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=TEMP_SUFFIX)
    os.close(descriptor)
    temporary = Path(name)
    try:
        os.chmod(temporary, 0o666 & ~current_umask())  # mkstemp makes it 0600: give it a normal file's mode
        yield temporary
        os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise


@contextmanager
def atomic_directory(path: Path) -> Iterator[Path]:
    """A temporary directory beside ``path`` to fill: it replaces ``path`` (and whatever was there) when the
    block ends without error, and is removed otherwise, so ``path`` never holds half of a result."""
    path.parent.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(dir=path.parent, prefix=f".{path.name}.", suffix=TEMP_SUFFIX))
    try:
        yield scratch
        if path.exists():
            shutil.rmtree(path)
        scratch.rename(path)
    finally:
        if scratch.exists():
            shutil.rmtree(scratch)


def write_json_atomic(path: Path, payload: dict[str, Any]) -> None:
    """Write JSON through :func:`atomic_path`: never half-written."""
    text = json.dumps(payload, indent=2)
    with atomic_path(path) as temporary:
        temporary.write_text(text, encoding="utf-8")
