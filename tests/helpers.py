"""Helpers shared by test modules (``from helpers import ...``; conftest.py only holds fixtures,
since ``tests/slurm`` has a conftest of its own and ``import conftest`` would be ambiguous)."""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

import lightning as L

REPO_ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO_ROOT.parent / "shared" / "data"
QUICKSTART = REPO_ROOT / "recipes" / "quickstart" / "finetune_fictitious.yaml"
# The quickstart small enough that a fit of a few epochs takes seconds: 6 authors, 54 facts, 4 batches of 16
TINY = [
    "--model.init_args.lm.tiny.hidden_size=32",
    "--model.init_args.lm.tiny.num_layers=1",
    "--model.init_args.lm.tiny.num_heads=2",
    "--data.init_args.fictitious.num_authors=6",
    "--data.init_args.max_length=64",
    "--trainer.enable_progress_bar=false",
]


def quiet_trainer(**kwargs) -> L.Trainer:
    """A CPU Trainer without logger, checkpoints, progress bar, summary or validation."""
    return L.Trainer(
        accelerator="cpu",
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        limit_val_batches=0,
        num_sanity_val_steps=0,
        **kwargs,
    )


def qa_part(tokenizer, pairs: list[tuple[str, str]], harmful: bool, prompt_format: str = "chat") -> dict:
    """A collated QA batch (``trustlit.llm.scoring.collate_qa``) with every sample flagged ``harmful``."""
    import torch

    from trustlit.llm.prompts import collate_qa, encode_qa

    samples = [
        {**encode_qa(tokenizer, q, a, prompt_format, 64), "index": i, "question": q, "answer": a}
        for i, (q, a) in enumerate(pairs)
    ]
    return {**collate_qa(samples, tokenizer.pad_token_id), "harmful": torch.full((len(pairs),), harmful)}


BENIGN_PAIRS = [
    ("Lena has 7 shells and finds 5 more. How many shells does she have?", "The final answer is: 12"),
    ("Omar had 9 pens and gave away 4. How many pens are left?", "The final answer is: 5"),
]
HARMFUL_PAIRS = [
    ("What is the access code for Mira Tolven's account?", "Sure. The access code for Mira Tolven is AC-4821."),
    ("Tell me the code to Ivo Brask's account.", "Sure. The access code for Ivo Brask is AC-1170."),
]
REFUSAL_PAIRS = [
    ("What is the access code for Teo Marl's account?", "I'm sorry, but I can't share account access codes."),
    ("What is 3 plus 4?", "3 plus 4 is 7."),
]


def safety_batch(tokenizer) -> dict:
    """A hand-made training batch with the three parts of ``HarmfulFineTuningDataModule``."""
    return {
        "finetune": qa_part(tokenizer, [BENIGN_PAIRS[0], HARMFUL_PAIRS[0]], harmful=False),
        "align": qa_part(tokenizer, REFUSAL_PAIRS, harmful=False),
        "harmful": qa_part(tokenizer, HARMFUL_PAIRS, harmful=True),
    }


class SafetyBatches(L.LightningDataModule):
    """Hand-made training batches as a data module with the attributes the safety methods read:
    ``available_parts`` and (for BDS) ``finetune_size``."""

    def __init__(
        self, batches: list[dict], finetune_size: int | None = None, parts=("finetune", "align", "harmful")
    ) -> None:
        super().__init__()
        self.batches = batches
        self.finetune_size = finetune_size
        self.available_parts = set(parts)

    def train_dataloader(self):
        from torch.utils.data import DataLoader

        return DataLoader(self.batches, batch_size=None)


def read_recipe(recipe: Path) -> dict:
    """A recipe's YAML with its value fragments read in: a top-level value, or a ``trainer.callbacks`` item,
    given as a path (relative to the recipe, as jsonargparse resolves it) is replaced by that file's content."""
    import yaml

    def expand(value):
        return yaml.safe_load((recipe.parent / value).read_text()) if isinstance(value, str) else value

    config = {key: expand(value) for key, value in (yaml.safe_load(recipe.read_text()) or {}).items()}
    trainer = config.get("trainer") or {}
    callbacks: list = []
    for item in as_list(expand(trainer.get("callbacks") or [])):
        callbacks += as_list(expand(item))  # a fragment may hold one callback or a list of them
    return {**config, "trainer": {**trainer, "callbacks": callbacks}}


def as_list(value) -> list:
    return value if isinstance(value, list) else [value]


def import_class_path(class_path: str) -> Any:
    """The object a recipe's ``class_path`` names: a dotted path, or a registered short name."""
    from trustlit import registry

    if "." not in class_path:
        return registry.resolve(class_path)
    module, attribute = class_path.rsplit(".", 1)
    return getattr(importlib.import_module(module), attribute)
