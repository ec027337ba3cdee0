"""Every registered method ships a recipe and a docs page (litgpt's config-hub pattern, built from the
registry so that a new method cannot ship without both), every registered name resolves, and a bad
hyperparameter is refused, naming its key, from Python and from a recipe at parse time."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import pytest
from helpers import REPO_ROOT, import_class_path, read_recipe

from trustlit import registry
from trustlit.hparams import PositiveFloat

METHODS = registry.entries(kind="method")
RECIPES = sorted((REPO_ROOT / "recipes").rglob("*.yaml"))
TINY = {"name_or_path": "tiny-llama", "tiny": {"hidden_size": 32, "num_layers": 2, "num_heads": 2}}
# Where the page name is not the plain snake_case of the class: the papers' one-word spellings.
PAGE_NAMES = {
    "SimNPO": "simnpo",
    "ReLUSAE": "relu_sae",
    "TopKSAE": "topk_sae",
    "BatchTopKSAE": "batch_topk_sae",
    "JumpReLUSAE": "jumprelu_sae",
    "TopERClassifier": "toper_classifier",
    "BridgePure": "bridgepure",
    "GaussianSceneFit": "gaussian_splatting",
    "StegoZipRestorer": "stegozip",
}


def method_doc_path(class_name: str) -> str:
    """``docs/methods/<page>.md`` of a method: snake_case of its class name, an acronym one word
    (``CausalLMFineTuning`` -> ``causal_lm_fine_tuning``, ``IdkDPO`` -> ``idk_dpo``, ``DPSGD`` -> ``dpsgd``)."""
    snake = re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "_", class_name).lower()
    return f"docs/methods/{PAGE_NAMES.get(class_name, snake)}.md"


def recipe_class_paths(recipe: Path) -> list[str]:
    """``model.class_path`` and every ``trainer.callbacks`` class_path of a recipe."""
    config = read_recipe(recipe)
    parts = [config.get("model"), *config["trainer"]["callbacks"]]
    return [part["class_path"] for part in parts if isinstance(part, dict) and "class_path" in part]


def recipes_naming(entry: registry.Entry) -> list[str]:
    """The recipes whose model or callbacks name ``entry``'s class, by path or as its re-export."""
    target = registry.resolve(entry.name)
    return [
        str(recipe.relative_to(REPO_ROOT))
        for recipe in RECIPES
        if any(path == entry.class_path or import_class_path(path) is target for path in recipe_class_paths(recipe))
    ]


def test_page_names_follow_one_rule():
    assert method_doc_path("CausalLMFineTuning") == "docs/methods/causal_lm_fine_tuning.md"
    assert method_doc_path("KLMinimization") == "docs/methods/kl_minimization.md"
    assert method_doc_path("AttentionShifting") == "docs/methods/attention_shifting.md"
    assert method_doc_path("IdkDPO") == "docs/methods/idk_dpo.md"
    assert method_doc_path("LUNAR") == "docs/methods/lunar.md"
    assert method_doc_path("SimNPO") == "docs/methods/simnpo.md"
    assert method_doc_path("MatchingPursuitSAE") == "docs/methods/matching_pursuit_sae.md"
    assert method_doc_path("JumpReLUSAE") == "docs/methods/jumprelu_sae.md"


@pytest.mark.parametrize("entry", METHODS, ids=lambda e: e.name)
def test_every_method_ships_a_recipe(entry):
    assert recipes_naming(entry), f"{entry.name}: no recipe under recipes/ names {entry.class_path}"


@pytest.mark.parametrize("entry", METHODS, ids=lambda e: e.name)
def test_every_method_has_a_docs_page_its_docstring_links_to(entry):
    page = method_doc_path(entry.name)
    assert (REPO_ROOT / page).is_file(), f"{entry.name}: {page} is missing"
    cls = registry.resolve(entry.name)
    docstrings = [inspect.getdoc(cls) or "", inspect.getmodule(cls).__doc__ or ""]
    assert any(page in doc for doc in docstrings), f"{entry.name}: its docstrings do not link to {page}"


@pytest.mark.parametrize("entry", registry.entries(), ids=lambda e: e.name)
def test_every_registered_name_resolves(entry):
    assert registry.resolve(entry.name).__name__ == entry.name


def test_a_bad_hyperparameter_is_refused_from_python_naming_class_key_and_range():
    from trustlit.unlearning import SimNPO

    with pytest.raises(ValueError, match=r"^SimNPO: beta=-1\.0 is invalid, expected a number > 0$"):
        SimNPO(lm=TINY, beta=-1.0)


def test_a_bad_hyperparameter_is_refused_by_the_recipe_parser_naming_the_key(capsys):
    from trustlit.cli import main

    recipe = REPO_ROOT / "recipes" / "unlearning" / "simnpo_tofu.yaml"
    with pytest.raises(SystemExit) as exit_info:
        main(["fit", "-c", str(recipe), "--model.init_args.beta=-1", "--print_config"])
    assert exit_info.value.code != 0
    error = capsys.readouterr().err
    assert error.strip() == "trustlit: error: model.init_args.beta=-1: expected a number > 0 (PositiveFloat)"


def test_restricted_values_reach_the_hyperparameters_as_plain_numbers():
    from trustlit.unlearning import SimNPO

    module = SimNPO(lm=TINY, beta=PositiveFloat(2.5))
    assert type(module.hparams["beta"]) is float and module.hparams["beta"] == 2.5
