"""The recipes, config fragments and sbatch templates trustlit ships, found in a checkout or an install.

In a source checkout they are the top-level ``recipes/``, ``configs/`` and ``slurm/``; a built
wheel carries copies under ``trustlit/_shipped/`` (``pyproject.toml`` maps them there), laid out
the same way so that a recipe's relative references to ``configs/`` still hold. A recipe can be
named by its path or by its listed name (``unlearning/simnpo_tofu``). Nothing here imports torch.
"""

from __future__ import annotations

import difflib
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent
CHECKOUT_ROOT = PACKAGE_DIR.parent
SHIPPED = ("recipes", "configs", "slurm")


def shipped_dir(name: str) -> Path:
    """The directory of shipped ``recipes``, ``configs`` or ``slurm``: the checkout's, else the installed copy."""
    if name not in SHIPPED:
        raise ValueError(f"unknown shipped directory '{name}': valid are {list(SHIPPED)}")
    # a checkout holds pyproject.toml beside the package; an installed package's parent is site-packages
    roots = [CHECKOUT_ROOT] if (CHECKOUT_ROOT / "pyproject.toml").is_file() else []
    for root in [*roots, PACKAGE_DIR / "_shipped"]:
        if (root / name).is_dir():
            return root / name
    raise FileNotFoundError(
        f"trustlit's {name}/ directory is missing: looked in {[str(r) for r in roots]} and "
        f"{PACKAGE_DIR / '_shipped'} (reinstall trustlit)"
    )


def recipe_description(path: Path) -> str:
    """The first comment line of a recipe, without the ``#``."""
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("#"):
            return line.lstrip("#").strip()
        if line.strip():
            break
    return ""


def recipe_name(path: Path, directory: Path) -> str:
    """A recipe's listed name: its path under ``directory`` without ``.yaml`` (``unlearning/simnpo_tofu``)."""
    return path.relative_to(directory).with_suffix("").as_posix()


def list_recipes(directory: Path | None = None) -> list[tuple[str, str]]:
    """``(name, description)`` of every ``*.yaml`` recipe under ``directory`` (default: the shipped recipes)."""
    directory = directory if directory is not None else shipped_dir("recipes")
    if not directory.is_dir():
        raise FileNotFoundError(f"recipe directory not found: {directory}")
    return [(recipe_name(path, directory), recipe_description(path)) for path in sorted(directory.rglob("*.yaml"))]


def find_recipe(name_or_path: str) -> Path:
    """A recipe file from its path, or from its listed name (with or without ``recipes/`` and ``.yaml``)."""
    path = Path(name_or_path).expanduser()
    if path.is_file():
        return path
    directory = shipped_dir("recipes")
    stem = name_or_path.removeprefix("recipes/").removesuffix(".yaml")
    candidate = directory / f"{stem}.yaml"
    if candidate.is_file():
        return candidate
    names = [name for name, _ in list_recipes(directory)]
    close = difflib.get_close_matches(stem, names, n=3, cutoff=0.5)
    hint = f"; did you mean {', '.join(close)}?" if close else "; `trustlit recipes` lists them"
    raise FileNotFoundError(f"recipe not found: '{name_or_path}' is neither a file nor a shipped recipe name{hint}")
