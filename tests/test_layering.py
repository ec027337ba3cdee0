"""Import layering: the causal-LM core does not import data, data does not import metrics, the
classifiers do not import privacy (read from the source, so a lazy import inside a function counts too)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from helpers import REPO_ROOT

PACKAGE = REPO_ROOT / "trustlit"
RULES = [  # (the files, the trustlit packages they must not import)
    ("llm", "trustlit.data"),
    ("llm", "trustlit.unlearning"),
    ("llm", "trustlit.safety"),
    ("data", "trustlit.metrics"),
    ("classifiers.py", "trustlit.privacy"),
    ("per_sample.py", "trustlit.privacy"),
    ("metrics", "trustlit.unlearning"),
]


def imported_modules(file: Path) -> set[str]:
    tree = ast.parse(file.read_text(encoding="utf-8"))
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def files_of(part: str) -> list[Path]:
    path = PACKAGE / part
    return sorted(path.rglob("*.py")) if path.is_dir() else [path]


@pytest.mark.parametrize(("part", "forbidden"), RULES, ids=[f"{p} !-> {f}" for p, f in RULES])
def test_layer_does_not_import(part, forbidden):
    offenders = {
        str(file.relative_to(REPO_ROOT)): sorted(m for m in imported_modules(file) if m.startswith(forbidden))
        for file in files_of(part)
    }
    assert not {file: names for file, names in offenders.items() if names}


def test_the_rules_see_imports():
    """The reader finds both import forms, so an empty result above means something."""
    assert {"trustlit.llm.hooks", "trustlit.llm"} <= imported_modules(PACKAGE / "unlearning" / "rmu.py")
