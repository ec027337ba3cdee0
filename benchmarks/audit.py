"""Membership-inference benchmarks: the poisoning attack that discredits MI tests (Mangaokar et al., NeurIPS 2025).

    .venv/bin/python -m benchmarks.audit [--sections ...] [--quick] [--workdir runs/benchmarks/audit]

- ``audit-poisoning-tiny``: a tiny Llama (hidden 64, 2 layers) first trained on a fictitious-facts corpus of other
  authors (its "pre-training", seed 7, 40 authors), then fine-tuned on members; members and non-members are QA pairs
  of disjoint authors of the fictitious corpus (seed 0) and, with ``--tofu``, of TOFU (``/work/shared/data/tofu``).
  For every fine-tuning length in ``--epochs`` (more epochs: a more accurate test) the section reports each test's
  AUC and TPR@1%FPR on clean vs poisoned training data, the share of targets whose decision flipped and the members'
  NLL; the poisons (``--budget`` per target, every member and non-member targeted) are crafted once with the
  pre-trained base model and every poison is outside its target's neighbourhood (3-gram, edit distance, MiniLM).
- ``audit-poisoning-smollm2``: the same on SmolLM2-135M-Instruct with LoRA, at the reduced scale of its options.

Target (the issue): the paper's direction, poisoning drives the tests to or below chance (the paper: the reference
test from AUC 0.647 to 0.089). Every stage (base model, poisons, each fine-tune's scores) is cached under
``--workdir``, so a long run resumes.
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

if not __package__:  # run as benchmarks/audit.py: import this repository's benchmarks package
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import torch

import trustlit
from benchmarks.common import family_report, mean_std, run_families, table
from trustlit.audit.mia_poisoning import (
    Poison,
    craft_poisons,
    fine_tune,
    membership_scores,
    mia_metrics,
    poisoned_training_set,
)
from trustlit.audit.neighbourhood import Neighbourhood
from trustlit.data.qa import read_jsonl
from trustlit.fictitious import fictitious_qa
from trustlit.paths import write_json_atomic

TOFU = Path("/work/shared/data/tofu")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("audit")
    group.add_argument("--records", type=int, default=20, help="members and non-members each")
    group.add_argument("--budget", type=int, default=8, help="poisons per target")
    group.add_argument("--steps", type=int, default=10, help="token-swap steps per poison")
    group.add_argument("--epochs", default="2,6", help="fine-tuning epochs, comma-separated")
    group.add_argument("--tofu", action="store_true", help="also TOFU members / non-members")
    group.add_argument("--smollm2-records", type=int, default=6, help="SmolLM2: members and non-members each")


def qa(records: list[dict]) -> list[dict[str, str]]:
    return [{"question": r["question"], "answer": r["answer"]} for r in records]


def datasets(args: argparse.Namespace, count: int) -> dict[str, tuple[list, list]]:
    """name -> (members, non-members): disjoint authors (fictitious: 9 records each, TOFU: 20)."""
    fictitious = qa(fictitious_qa(num_authors=40, seed=0))
    sets = {"fictitious": (fictitious[:count], fictitious[len(fictitious) // 2 :][:count])}
    if args.tofu:
        tofu = qa(read_jsonl(TOFU / "full.json"))
        sets["tofu"] = (tofu[:count], tofu[2000 : 2000 + count])
    return sets


def cached(path: Path, make: Any) -> Any:
    """The JSON at ``path``, else ``make()`` written there atomically."""
    if path.is_file():
        return json.loads(path.read_text("utf-8"))
    value = make()
    write_json_atomic(path, value)
    return value


def tiny_base(workdir: Path, quick: bool) -> tuple[Any, Any]:
    """The tiny Llama after its fictitious 'pre-training' on other authors (cached state dict)."""
    from trustlit.llm.loading import build_tiny_causal_lm

    model, tokenizer = build_tiny_causal_lm(seed=0)
    path = workdir / f"tiny_base{'_quick' if quick else ''}.pt"
    if path.is_file():
        model.load_state_dict(torch.load(path))
    else:
        corpus = qa(fictitious_qa(num_authors=40, seed=7))
        fine_tune(model, tokenizer, corpus, epochs=2 if quick else 10, lr=3e-3, batch_size=16)
        path.parent.mkdir(parents=True, exist_ok=True)
        torch.save(model.state_dict(), path)
    return model.eval(), tokenizer


def experiment(
    name: str,
    base: Any,
    tokenizer: Any,
    members: list,
    non_members: list,
    args: argparse.Namespace,
    workdir: Path,
    training: dict[str, Any],
    epochs: list[int],
) -> list[list[str]]:
    """Rows of one model x dataset: per epochs, per test: AUC / TPR clean and poisoned, flips, member NLL."""
    neighbourhood = Neighbourhood()
    population = [*members, *non_members]
    is_member = torch.tensor([True] * len(members) + [False] * len(non_members))

    def make_poisons() -> list[dict]:
        began, poisons = time.perf_counter(), []
        for index, target in enumerate(population):
            goal = "false_negative" if index < len(members) else "false_positive"
            poisons += craft_poisons(
                base, tokenizer, target, goal, args.budget, neighbourhood, seed=1000 * index, steps=args.steps
            )
            print(f"{name}: poisons for {index + 1}/{len(population)} targets ({time.perf_counter() - began:.0f} s)")
        return [asdict(p) for p in poisons]

    poisons = [Poison(**p) for p in cached(workdir / f"{name}_poisons.json", make_poisons)]
    assert not any(
        neighbourhood.contains_many(t["answer"], [p.answer for p in poisons if p.question == t["question"]]).any()
        for t in population
    )
    rows = []
    for count in epochs:

        def scores(kind: str, count: int = count) -> dict[str, list[float]]:
            model = copy.deepcopy(base)
            records = members if kind == "clean" else poisoned_training_set(members, poisons)
            fine_tune(model, tokenizer, records, epochs=count, **training)
            return {
                t: s.tolist() for t, s in membership_scores(model, tokenizer, population, (base, tokenizer)).items()
            }

        runs = {
            kind: cached(workdir / f"{name}_e{count}_{kind}.json", lambda k=kind: scores(k))
            for kind in ("clean", "poisoned")
        }
        metrics = {kind: mia_metrics({t: torch.tensor(s) for t, s in runs[kind].items()}, is_member) for kind in runs}
        nll = {kind: -torch.tensor(runs[kind]["loss"][: len(members)]).mean().item() for kind in runs}
        for test in metrics["clean"]:
            clean, poisoned = metrics["clean"][test], metrics["poisoned"][test]
            rows.append(
                [
                    name,
                    str(count),
                    test,
                    f"{clean['auc']:.3f}",
                    f"{poisoned['auc']:.3f}",
                    f"{clean['tpr_at_fpr']:.3f}",
                    f"{poisoned['tpr_at_fpr']:.3f}",
                    f"{nll['clean']:.3f}",
                    f"{nll['poisoned']:.3f}",
                ]
            )
    similarity = mean_std([p.similarity - p.start_similarity for p in poisons], 3)
    print(f"{name}: J gain over the start {similarity}")
    return rows


HEADER = [
    "data",
    "epochs",
    "test",
    "AUC clean",
    "AUC poisoned",
    "TPR@1% clean",
    "TPR@1% poisoned",
    "member NLL clean",
    "member NLL poisoned",
]


def poisoning_tiny(args: argparse.Namespace) -> str:
    workdir = args.workdir / ("tiny_quick" if args.quick else "tiny")
    count, epochs = (4, [2]) if args.quick else (args.records, [int(e) for e in args.epochs.split(",")])
    base, tokenizer = tiny_base(args.workdir, args.quick)
    rows = []
    for name, (members, non_members) in datasets(args, count).items():
        training = {"lr": 1e-3, "batch_size": 8}
        rows += experiment(name, base, tokenizer, members, non_members, args, workdir, training, epochs)
    return f"""## audit-poisoning-tiny: MI tests on clean vs poisoned fine-tuning, tiny Llama

Tiny Llama (hidden 64, 2 layers) pre-trained on 40 other fictitious authors; {count} members and {count} non-members
(disjoint authors); every member gets {args.budget} false-negative poisons and every non-member {args.budget}
false-positive poisons ({args.steps} GCG steps of 32 candidates, top-16), each outside its target's neighbourhood
(3-gram overlap < 0.5, character edit distance > 0.3, MiniLM cosine < 0.8; checked). The reference model is the
pre-trained base. AdamW lr 1e-3, batch 8; the poisoned run trains on members + poisons for the same epochs.

{table(HEADER, rows, "lllrrrrrr")}

{reading(rows)}
"""


def reading(rows: list[list[str]]) -> str:
    """The target check: which tests poisoning drove to chance (AUC <= 0.55) or below it, and the AUC drops."""
    lines = []
    for data, epochs in dict.fromkeys((r[0], r[1]) for r in rows):
        chosen = [r for r in rows if r[:2] == [data, epochs]]
        drops = ", ".join(f"{r[2]} {r[3]} -> {r[4]}" for r in chosen)
        at_chance = [r[2] for r in chosen if float(r[4]) <= 0.55] or ["none"]
        lines.append(f"- {data}, {epochs} epochs: AUC {drops}; at or below chance (<= 0.55): {', '.join(at_chance)}.")
    return "Target (the paper's direction, tests driven to or below chance):\n\n" + "\n".join(lines)


def poisoning_smollm2(args: argparse.Namespace) -> str:
    from trustlit.llm.loading import load_causal_lm

    workdir = args.workdir / ("smollm2_quick" if args.quick else "smollm2")
    count = 2 if args.quick else args.smollm2_records
    lora = {"r": 8, "lora_alpha": 16, "target_modules": ["q_proj", "v_proj"]}
    base, tokenizer = load_causal_lm("smollm2-135m-instruct", lora=lora)
    base.eval()
    rows = []
    for name, (members, non_members) in datasets(args, count).items():
        rows += experiment(
            f"smollm2-{name}", base, tokenizer, members, non_members, args, workdir, {"lr": 1e-3, "batch_size": 4}, [3]
        )
    return f"""## audit-poisoning-smollm2: MI tests on clean vs poisoned LoRA fine-tuning, SmolLM2-135M-Instruct

SmolLM2-135M-Instruct (LoRA r 8 on q/v), reduced scale for a 2-core CPU: {count} members, {count} non-members,
{args.budget} poisons per target, {args.steps} GCG steps, 3 epochs at lr 1e-3. The base (LoRA off) is the surrogate and
the reference. Same neighbourhood as the tiny section.

{table(HEADER, rows, "lllrrrrrr")}

{reading(rows)}
"""


SECTIONS = {"audit-poisoning-tiny": poisoning_tiny, "audit-poisoning-smollm2": poisoning_smollm2}
FAMILIES = (sys.modules[__name__],)
REPORT = family_report(
    "Membership-inference benchmarks",
    "benchmarks/audit.py",
    "docs/benchmarks/audit.md",
    FAMILIES,
    f"trustlit {trustlit.__version__}",
)


def main(argv: list[str] | None = None) -> None:
    run_families(
        REPORT,
        FAMILIES,
        argv,
        quick="a smoke run: 4 members, one fine-tuning length",
        workdir="runs/benchmarks/audit",
        threads=1,
    )


if __name__ == "__main__":
    main()
