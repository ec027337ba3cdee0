"""Atomic JSON writes: the file appears whole or not at all, with a normal file's permissions."""

from __future__ import annotations

import json
import os

import pytest

from trustlit.paths import write_json_atomic


def test_written_file_has_the_umask_mode_and_no_temporary_is_left(tmp_path):
    previous = os.umask(0o022)
    try:
        write_json_atomic(tmp_path / "out" / "results.json", {"a": 1})
    finally:
        os.umask(previous)
    written = tmp_path / "out" / "results.json"
    assert json.loads(written.read_text()) == {"a": 1}
    assert written.stat().st_mode & 0o777 == 0o644
    assert [p.name for p in written.parent.iterdir()] == ["results.json"]


def test_a_failed_write_keeps_the_previous_file(tmp_path):
    target = tmp_path / "results.json"
    write_json_atomic(target, {"run": "first"})
    with pytest.raises(TypeError):
        write_json_atomic(target, {"run": object()})  # not serialisable: fails midway
    assert json.loads(target.read_text()) == {"run": "first"}
    assert [p.name for p in tmp_path.iterdir()] == ["results.json"]
