"""Membership-inference benchmarks: PoisonM, the poisoning that discredits MI tests (Mangaokar et al., NeurIPS 2025).

    .venv/bin/python -m benchmarks.audit [--sections ...] [--quick] [--tofu] [--workdir runs/benchmarks/audit]

- ``audit-poisoning-tiny``: the paper's Section 6.1 protocol scaled to a 2-core CPU. A tiny Llama (hidden 64, 2
  layers) "pre-trained" on 40 fictitious authors (seed 7) is fine-tuned for 1 epoch (AdamW, batch 16) on a
  background set with member canaries inserted; as many held-out canaries are kept out. Fictitious rows: canaries
  are fictitious-fact answers (seed 0, >= 7 words), the background is TOFU text (like the paper's WikiText
  background with AI4Privacy canaries); TOFU rows (``--tofu``): TOFU canaries and TOFU background (disjoint
  records). Membership labels follow the neighbourhood (a held-out canary with a neighbour in the training set is a
  member). For each neighbourhood (7-gram, exact match) one poisoned dataset: every member canary's record becomes a
  poisoned neighbour (b1 = 1) and, per non-member, b2 = 10 background records become poisoned non-neighbours. Each
  test's AUC and TPR@1%FPR on the clean vs poisoned model, beside the paper's Table 2 / Table 6 numbers, and
  Theorem 5.1's trade-off: Adv(clean) + Adv(poisoned) against the measured mapping error delta (a third fine-tune
  on the ideal set, x_sample where the poison is).
- ``audit-poisoning-smollm2``: the 7-gram rows (TOFU ones with ``--tofu``) on SmolLM2-135M-Instruct with LoRA (r 8
  on q/v), reduced (``--smollm2-*`` options) to fit 2 CPU cores; a clean check first (each cached clean fine-tune's
  AUCs: ``--smollm2-clean-only`` stops there), then the poisoned run (``--smollm2-no-ideal``: without the ideal run).

Every stage (base model, poisoned sets, each fine-tune's scores) is cached under ``--workdir``, so a run resumes.
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any

if not __package__:  # run as benchmarks/audit.py: import this repository's benchmarks package
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import torch

import trustlit
from benchmarks.common import TOFU, cached_json, family_report, run_families, table
from trustlit.audit.mia import roc_auc
from trustlit.audit.mia_poisoning import (
    NON_NEIGHBOUR_BUDGET,
    RUNS,
    Poison,
    PoisonedData,
    build_poisoned_data,
    clean_set,
    evaluate_runs,
    fine_tune,
    membership_scores,
    qa_records,
)
from trustlit.audit.neighbourhood import Neighbourhood
from trustlit.data.qa import read_jsonl
from trustlit.fictitious import fictitious_qa
from trustlit.paths import write_json_atomic

SMOLLM2_LORA = {"r": 8, "lora_alpha": 16, "lora_dropout": 0.0, "target_modules": ["q_proj", "v_proj"]}
TESTS = ("loss", "min_k", "zlib", "min_k_plus_plus", "reference")
# The paper's AI4Privacy columns (Pythia-6.9B): test -> (natural AUC, PoisonM AUC, natural TPR@1%, PoisonM TPR@1%).
# Table 2 / Table 6 lost their row labels in the text we read; the blocks are 7-gram, exact, embedding, edit, the
# order of Table 3 and Section 6.1 (the 7-gram block matches Table 4's natural numbers).
PAPER = {
    "ngram": {
        "loss": (0.587, 0.252, 0.104, 0.004),
        "min_k": (0.561, 0.408, 0.089, 0.065),
        "zlib": (0.564, 0.375, 0.097, 0.034),
        "perturb": (0.600, 0.274, 0.104, 0.004),
        "reference": (0.647, 0.089, 0.108, 0.004),
    },
    "exact": {
        "loss": (0.548, 0.043, 0.030, 0.000),
        "min_k": (0.516, 0.233, 0.008, 0.002),
        "zlib": (0.521, 0.115, 0.024, 0.000),
        "perturb": (0.570, 0.059, 0.048, 0.000),
        "reference": (0.625, 0.022, 0.062, 0.000),
    },
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("audit")
    group.add_argument("--canaries", type=int, default=50, help="member and held-out canaries each")
    group.add_argument("--background", type=int, default=3000, help="background records")
    group.add_argument("--lr", type=float, default=1e-3, help="fine-tuning learning rate (1 epoch, batch 16)")
    group.add_argument("--kinds", default="ngram,exact", help="neighbourhoods, comma-separated")
    group.add_argument("--tofu", action="store_true", help="also TOFU canaries on TOFU background")
    group.add_argument("--tofu-canaries", type=int, default=20, help="TOFU: member and held-out canaries each")
    group.add_argument("--smollm2-canaries", type=int, default=20, help="SmolLM2: member and held-out canaries each")
    group.add_argument("--smollm2-background", type=int, default=80, help="SmolLM2: background records")
    group.add_argument("--smollm2-budget", type=int, default=2, help="SmolLM2: b2, poisons per non-member")
    group.add_argument("--smollm2-top-k", type=int, default=4, help="SmolLM2: candidate tokens per swap (GCG top-k)")
    group.add_argument("--smollm2-lr", type=float, default=5e-3, help="SmolLM2: LoRA learning rate")
    group.add_argument("--smollm2-epochs", type=int, default=3, help="SmolLM2: fine-tuning epochs")
    group.add_argument("--smollm2-no-ideal", action="store_true", help="SmolLM2: no ideal run unless cached")
    group.add_argument("--smollm2-clean-only", action="store_true", help="SmolLM2: the clean fine-tune's AUCs only")


def datasets(count: int, size: int, *, tofu: bool, tofu_canaries: int) -> dict[str, tuple[list, list, list, list]]:
    """name -> (background, members, auxiliary, held-out canaries), all disjoint; the TOFU rows (``tofu``) with
    min(count, tofu_canaries) canaries each."""
    records = qa_records(read_jsonl(TOFU / "full.json"))
    fictitious = [r for r in qa_records(fictitious_qa(num_authors=128, seed=0)) if len(r["answer"].split()) >= 7]
    step = len(fictitious) // 3  # members, auxiliary, held-out from disjoint authors
    sets = {
        "fictitious": (records[:size], fictitious[:count], fictitious[step : step + count], fictitious[-count:])
    }  # fmt: skip
    if tofu:
        tofu_size = min(size, len(records) - 1200)
        n = min(count, tofu_canaries)
        sets["tofu"] = (records[1200 : 1200 + tofu_size], records[:n], records[400 : 400 + n], records[800 : 800 + n])
    return sets


def tiny_base(workdir: Path, quick: bool) -> tuple[Any, Any]:
    """The tiny Llama after its fictitious 'pre-training' on other authors (cached state dict)."""
    from trustlit.llm.loading import build_tiny_causal_lm

    model, tokenizer = build_tiny_causal_lm(seed=0)
    path = workdir / f"tiny_base{'_quick' if quick else ''}.pt"
    if path.is_file():
        model.load_state_dict(torch.load(path))
    else:
        corpus = qa_records(fictitious_qa(num_authors=40, seed=7))
        fine_tune(model, tokenizer, corpus, epochs=2 if quick else 10, lr=3e-3, batch_size=16)
        path.parent.mkdir(parents=True, exist_ok=True)
        torch.save(model.state_dict(), path)
    return model.eval(), tokenizer


def stage_file(run_dir: Path, *parts: str) -> Path:
    """A cached stage of one experiment: ``<dataset>[_<neighbourhood>]_<stage>.json`` under ``run_dir``."""
    return run_dir / f"{'_'.join(parts)}.json"


def experiment(
    name: str,
    base: Any,
    tokenizer: Any,
    data: tuple,
    kind: str,
    *,
    run_dir: Path,
    training: dict[str, Any],
    attack: dict[str, Any] | None = None,
    budget: int = NON_NEIGHBOUR_BUDGET,
    runs: tuple[str, ...] = RUNS,
) -> dict:
    """One dataset x neighbourhood: the poisoned set, the fine-tunes' scores, labels and metrics (cached).

    ``training``: :func:`fine_tune` options; ``attack``: :func:`poison_non_neighbour` options; ``budget``: b2;
    ``runs``: the fine-tunes to run. The clean run goes first: it does not depend on the poisons."""
    background, members, auxiliary, held_out = data
    neighbourhood = Neighbourhood(kind)
    population = [*members, *held_out]
    length = {"max_length": training.get("max_length", 256)}

    def scores(records: list) -> dict[str, list[float]]:
        model = copy.deepcopy(base)
        fine_tune(model, tokenizer, records, **training)
        return {t: s.tolist() for t, s in membership_scores(model, tokenizer, population, base, **length).items()}

    def make_data() -> dict:
        poisoned = build_poisoned_data(
            base, tokenizer, background, members, held_out, auxiliary, neighbourhood,
            non_neighbour_budget=budget, attack=attack,
        )  # fmt: skip
        return asdict(poisoned)

    clean = clean_set(background, members)
    results = {"clean": cached_json(stage_file(run_dir, name, "clean"), lambda: scores(clean))}
    texts = [r["answer"] for r in population]
    is_member = torch.from_numpy(neighbourhood.members(texts, [r["answer"] for r in clean]))
    auc = {t: roc_auc(torch.tensor(v), is_member) for t, v in results["clean"].items()}
    check = {"data": name, "canaries": len(members), "background": len(background), "training": training, "auc": auc}
    write_json_atomic(stage_file(run_dir, name, kind, "clean_auc"), check)
    if "poisoned" not in runs:  # the clean check alone: is there a membership signal to discredit?
        return {"clean_auc": auc}
    raw = cached_json(stage_file(run_dir, name, kind, "data"), make_data)
    poisoned = PoisonedData(**{**raw, "poisons": [Poison(**p) for p in raw["poisons"]]})
    sets = {"clean": poisoned.clean, "poisoned": poisoned.poisoned, "ideal": poisoned.ideal}
    sets = {run: records for run, records in sets.items() if run in runs}
    for run in sets:
        if run != "clean":
            results[run] = cached_json(stage_file(run_dir, name, kind, run), lambda r=sets[run]: scores(r))
    labels = {run: torch.from_numpy(neighbourhood.members(texts, [r["answer"] for r in sets[run]])) for run in sets}
    tensors = {run: {t: torch.tensor(v) for t, v in results[run].items()} for run in sets}
    return {"data": poisoned, "labels": labels, "metrics": evaluate_runs(tensors, labels, poisoned)}


def spearman(a: list[float], b: list[float]) -> float:
    """Spearman's rank correlation (no ties expected among a handful of AUCs)."""
    ranks = [torch.tensor(v).argsort().argsort().double() for v in (a, b)]
    return float(torch.corrcoef(torch.stack(ranks))[0, 1])


HEADER = ["data", "N_r", "test", "AUC clean", "AUC poisoned", "paper AUC", "TPR@1% clean", "TPR@1% poisoned",
          "paper TPR@1%", "Adv clean", "Adv poisoned", "sum", "delta"]  # fmt: skip


def rows_of(name: str, kind: str, result: dict) -> list[list[str]]:
    rows = []
    for test, m in result["metrics"].items():
        paper = PAPER.get(kind, {}).get(test)
        rows.append(
            [
                name,
                kind,
                test,
                f"{m['auc_clean']:.3f}",
                f"{m['auc_poisoned']:.3f}",
                f"{paper[0]:.3f} -> {paper[1]:.3f}" if paper else "-",
                f"{m['tpr_clean']:.3f}",
                f"{m['tpr_poisoned']:.3f}",
                f"{paper[2]:.3f} -> {paper[3]:.3f}" if paper else "-",
                f"{m['advantage_clean']:.3f}",
                f"{m['advantage_poisoned']:.3f}",
                f"{m['advantage_sum']:.3f}",
                f"{m['delta']:.3f}" if "delta" in m else "-",
            ]
        )
    return rows


def summary(name: str, kind: str, result: dict) -> str:
    data, labels, metrics = result["data"], result["labels"], result["metrics"]
    below = [t for t, m in metrics.items() if m["auc_poisoned"] < 0.5]
    holds = [t for t, m in metrics.items() if "delta" in m and m["advantage_sum"] <= m["delta"]]
    held = f"{len(holds)} of {len(metrics)} tests" if "ideal" in labels else "not measured (no ideal run)"
    tests = list(metrics)
    rho = spearman([metrics[t]["auc_clean"] for t in tests], [metrics[t]["auc_poisoned"] for t in tests])
    return (
        f"- {name}, {kind}: {int(labels['clean'].sum())} of {len(labels['clean'])} canaries are members "
        f"(clean set), {int((labels['clean'] != labels['poisoned']).sum())} labels changed by the poisoning; "
        f"{len(data.false_negatives)} false-negative targets ({len(data.skipped)} members got no poisoned neighbour), "
        f"{len(data.false_positives)} false-positive targets, {len(data.poisons)} poisons. AUC below chance after "
        f"poisoning: {', '.join(below) or 'none'}. Adv(clean) + Adv(poisoned) <= delta (Theorem 5.1) for "
        f"{held}; Spearman(natural AUC, poisoned AUC) over the tests = {rho:.2f} "
        "(the paper: the best natural tests are the least robust, i.e. negative)."
    )


def poisoning_tiny(args: argparse.Namespace) -> str:
    count, size = (6, 120) if args.quick else (args.canaries, args.background)
    scale = f"c{count}_t{args.tofu_canaries}_b{size}_lr{args.lr:g}"  # a cache per scale: resuming never mixes them
    run_dir = args.workdir / ("tiny_quick" if args.quick else "tiny") / scale
    base, tokenizer = tiny_base(args.workdir, args.quick)
    rows, notes = [], []
    for name, data in datasets(count, size, tofu=args.tofu, tofu_canaries=args.tofu_canaries).items():
        for kind in args.kinds.split(","):
            result = experiment(name, base, tokenizer, data, kind, run_dir=run_dir, training={"lr": args.lr})
            rows += rows_of(name, kind, result)
            notes.append(summary(name, kind, result))
    notes_text = "\n".join(notes)
    return f"""## audit-poisoning-tiny: PoisonM at the paper's protocol, scaled to a tiny Llama on 2 CPU cores

Paper (Section 6.1): Pythia-6.9B fine-tuned 1 epoch (AdamW lr 2e-5, batch 16) on 100K WikiText background with 500
canaries (AI4Privacy / AGNews), 500 held out; b1 = 1, b2 = 10; 7-gram, exact, embedding (E5, c = 0.9) and edit
(l = 0.48) neighbourhoods. Here: a tiny Llama (hidden 64, 2 layers; pre-trained on 40 fictitious authors) fine-tuned
1 epoch (AdamW lr {args.lr:g}, batch 16: the tiny model learns nothing at 2e-5) on {size} background records with
{count} member canaries, {count} held out (TOFU rows: {args.tofu_canaries}); b1 = 1, b2 = 10; word 7-grams and exact
match. Not run: the perturbation test (not in trustlit.audit.mia; Min-K%++ is extra), embedding (a MiniLM call
per candidate swap: too slow here) and edit distance (on these texts two unrelated answers have a median
lev/(|x|+|x'|) of 0.43-0.45 < 0.48, so nearly every held-out canary is an edit-distance member).
Adv = E[T | member] - E[T | non-member] (Lemma 3.5); delta = mean |T(poisoned) - T(ideal)| over the
false-negative plus the false-positive targets (Theorem 5.1).

{table(HEADER, rows, "lllrrlrrlrrrr")}

{notes_text}

Reading: "sum <= delta" is Theorem 5.1's inequality on one training run (the theorem is about expectations over
training); the cross-test Spearman is the paper's empirical trade-off (Section 6.2: the reference test, best
naturally, is the worst after poisoning), a ranking over only five tests. In each dataset one test stays at or
above chance (in the run of this page: Min-K%++ on the fictitious canaries, zlib on TOFU); we have not
established why.
"""


def poisoning_smollm2(args: argparse.Namespace) -> str:
    from trustlit.llm.loading import load_causal_lm

    count, size = (4, 40) if args.quick else (args.smollm2_canaries, args.smollm2_background)
    budget, top_k, lr, epochs = args.smollm2_budget, args.smollm2_top_k, args.smollm2_lr, args.smollm2_epochs
    scale = f"c={count},b={size},b2={budget},k={top_k},lr={lr:g},e={epochs}"
    run_dir = args.workdir / ("smollm2_quick" if args.quick else "smollm2") / scale
    training = {"lr": lr, "epochs": epochs, "batch_size": 16, "max_length": 128}
    attack = {"top_k": top_k, "max_steps": 200}
    base, tokenizer = load_causal_lm("smollm2-135m-instruct", lora=SMOLLM2_LORA)
    base.eval()
    rows, notes, no_ideal = [], [], []
    for name, data in datasets(count, size, tofu=args.tofu, tofu_canaries=count).items():
        ideal_cached = stage_file(run_dir, name, "ngram", "ideal").is_file()
        runs = smollm2_runs(clean_only=args.smollm2_clean_only, no_ideal=args.smollm2_no_ideal and not ideal_cached)
        no_ideal += [] if "ideal" in runs else [name]
        result = experiment(
            name, base, tokenizer, data, "ngram", run_dir=run_dir, training=training, attack=attack, budget=budget,
            runs=runs,
        )  # fmt: skip
        if "clean_auc" in result:
            notes.append(f"- {name}: poisoned run not run (`--smollm2-clean-only`).")
        else:
            rows += rows_of(name, "ngram", result)
            notes.append(summary(name, "ngram", result))
    checks = sorted(run_dir.parent.glob(stage_file(Path("*"), "*", "ngram", "clean_auc").as_posix()))
    check_rows = [clean_check_row(path) for path in checks]
    poisoned = "\n".join(notes)
    if rows:
        poisoned = f"{table(HEADER, rows, 'lllrrlrrlrrrr')}\n\n{poisoned}"
    ideal = f" Not run either ({', '.join(no_ideal)}): the ideal fine-tune, so no delta." if no_ideal else ""
    return f"""## audit-poisoning-smollm2: PoisonM on SmolLM2-135M-Instruct with LoRA, reduced for 2 CPU cores

The issue's real-model check. SmolLM2-135M-Instruct (the shipped GGUF, dequantized to float32) with LoRA (r 8,
alpha 16, no dropout, on q_proj and v_proj); the LoRA-wrapped base (adapters at zero) is the attacker's
activation model f, the model fine-tuned, and the reference test's reference. The 7-gram rows of the tiny
section at a smaller scale: {size} TOFU background records, {count} fictitious member canaries and {count} held out
(TOFU rows, `--tofu`: {count} + {count} TOFU canaries on {size} other TOFU records, as in the tiny section); 1
poisoned neighbour per member (b1 = 1) and b2 = {budget} poisoned non-neighbours per non-member (the paper's b2 = 10
would take {10 / budget:g}x the attack time: each GCG swap costs a forward and backward pass plus {top_k} candidate
forwards, a few seconds on one CPU thread); top-{top_k} GCG candidates per swap (the tiny section: 64); fine-tuning
{epochs} epoch(s), AdamW lr {lr:g}, batch 16, answers truncated at 128 tokens: raised from the paper-like 1 epoch at
lr 1e-3, where the clean fine-tune leaves every test near or below chance (the clean check). Not run: the
exact-match rows, and what the tiny section leaves out (perturbation, embedding, edit distance).{ideal}

Clean check (the paper's premise: the natural tests beat chance on the clean fine-tune; paper, 7-gram AI4Privacy
on Pythia-6.9B: LOSS 0.587, reference 0.647), AUC of each cached clean fine-tune (labels: 7-gram membership):

{table(CHECK_HEADER, check_rows, "lrrrr" + "r" * len(TESTS))}

{poisoned}

Reading: AUCs on {2 * count} canaries carry a standard error near 0.09, so one test's drop is weak evidence; the
five tests share one fine-tune each, so their agreement is not five independent checks. A label changed by the
poisoning is a held-out canary whose only 7-gram neighbour in the training set was a member canary: the poisoned
neighbour that replaces the member keeps one 7-gram of the member, not necessarily the held-out one's (the targets'
own labels never change).
"""


def smollm2_runs(*, clean_only: bool, no_ideal: bool) -> tuple[str, ...]:
    """The fine-tunes to run: the clean one only, without the ideal one (``--smollm2-no-ideal`` when no ideal run is
    cached), or all three."""
    if clean_only:
        return RUNS[:1]
    return RUNS[:2] if no_ideal else RUNS


CHECK_HEADER = ["data", "background", "epochs", "lr", "canaries", *TESTS]


def clean_check_row(path: Path) -> list[str]:
    """One cached clean fine-tune's scale and AUC per test (the JSON :func:`experiment` writes)."""
    check = json.loads(path.read_text("utf-8"))
    training, count = check["training"], check["canaries"]
    return [check["data"], str(check["background"]), str(training["epochs"]), f"{training['lr']:g}",
            f"{count} + {count}", *(f"{check['auc'][t]:.3f}" for t in TESTS)]  # fmt: skip


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
        quick="a smoke run: 6 canaries each, 120 background records",
        workdir="runs/benchmarks/audit",
        threads=1,
    )


if __name__ == "__main__":
    main()
