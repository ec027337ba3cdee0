"""The registry of short names, and what the light CLI commands and `import trustlit` do not import."""

from __future__ import annotations

import subprocess
import sys

import pytest
from helpers import REPO_ROOT

from trustlit import registry


def test_every_entry_names_a_module_and_attribute():
    for entry in registry.entries():
        assert entry.target == f"{entry.module}:{entry.attribute}"
        assert entry.kind in registry.KINDS
        assert entry.class_path.endswith(f".{entry.name}")


def test_resolve_imports_the_class():
    from trustlit.unlearning.simnpo import SimNPO

    assert registry.resolve("SimNPO") is SimNPO


def test_unknown_name_lists_close_matches():
    with pytest.raises(KeyError, match="unknown trustlit name 'SimNP'; did you mean SimNPO"):
        registry.resolve("SimNP")


def test_registering_a_name_twice_with_another_target_is_refused():
    with pytest.raises(ValueError, match=r"'SimNPO' is registered already, as trustlit\.unlearning\.simnpo:SimNPO"):
        registry.register("SimNPO", "elsewhere.module:SimNPO", kind="method", family="unlearning")
    with pytest.raises(ValueError, match=r"must be 'package\.module:Attribute'"):
        registry.register("Thing", "no_colon", kind="method", family="x")
    with pytest.raises(ValueError, match="kind for 'Thing' must be one of"):
        registry.register("Thing", "a.b:Thing", kind="widget", family="x")


def test_entries_filter_by_kind_and_family():
    methods = registry.entries(kind="method", family="unlearning")
    assert {"SimNPO", "NPO", "LUNAR", "AttentionShifting"} <= {e.name for e in methods}
    assert all(e.kind == "method" and e.family == "unlearning" for e in methods)


def imported_after(code: str) -> set[str]:
    """Top-level modules imported by a fresh interpreter after running ``code``."""
    script = f"{code}\nimport sys\nprint(' '.join(sorted({{m.split('.')[0] for m in sys.modules}})))"
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=REPO_ROOT, check=True)
    return set(result.stdout.split("\n")[-2].split())


@pytest.mark.parametrize(
    "code",
    [
        "import trustlit",
        "from trustlit.cli import main; main(['--help'])",
        "from trustlit.cli import main; main(['recipes'])",
        "from trustlit import registry; registry.entries()",
    ],
)
def test_light_commands_import_no_torch(code):
    heavy = imported_after(code) & {"torch", "lightning", "transformers", "opacus", "datasets", "wandb"}
    assert not heavy, f"{code!r} imported {sorted(heavy)}"


def test_a_short_class_name_imports_only_its_family():
    code = (
        "from trustlit.lightning_cli import import_named_classes\n"
        "import_named_classes(['fit', '--model', 'SimNPO'], [])"
    )
    imported = imported_after(code)
    script = code + "\nimport sys\nprint([m for m in sys.modules if m.startswith('trustlit.')])"
    modules = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=REPO_ROOT, check=True)
    assert "trustlit.unlearning.simnpo" in modules.stdout
    assert "trustlit.safety" not in modules.stdout and "trustlit.privacy" not in modules.stdout
    assert "opacus" not in imported
