"""Hallucination source tracing benchmark: Subsequence Association Tracing (SAT) against per-token attribution.

Sections (composed by ``benchmarks/interpret.py`` into ``docs/benchmarks/interpret.md``):

- ``tracing-planted``: a tiny Llama fine-tuned by ``recipes/interpret/planted_lm_tiny.yaml`` on the planted
  corpus (trustlit/data/planted.py: trigger phrases co-occur 60 times with a wrong city, names 6 times
  with their true city), prompted with a trigger so that it hallucinates the trigger's city y_h. Ground
  truth: the trigger's tokens. Per method, top-1 / top-5 recovery of the trigger among the ranked
  spans of the trigger's length, and the reproduction rate: the method's top span inserted into
  unrelated faithful prompts (other people, no trigger), how often greedy decoding then gives y_h.
- ``tracing-planted-decoys``: the same with each trigger word also planted alone in faithful questions
  (``decoy_repeats``), so that only the pair of words is spurious.
- ``tracing-smollm2``: SAT on SmolLM2-135M-Instruct's own answers to TOFU questions about fictitious
  authors (hallucinations: it never saw them), a qualitative table.

Trained models and per-prompt results are cached under ``<workdir>/tracing/``.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time
from pathlib import Path
from typing import Any

from benchmarks.common import TOFU, repo_path, table

RECIPE = "recipes/interpret/planted_lm_tiny.yaml"
# "SAT (random replacement)": the ablation with uniformly random replacement tokens instead of embedding neighbours.
METHODS = (
    "SAT",
    "SAT (random replacement)",
    "occlusion",
    "gradient_x_input",
    "integrated_gradients",
    "attention_rollout",
)
CONTROLS = ("random span", "planted trigger")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--tracing-samples", type=int, default=1024, help="SAT's perturbed prompts N (default 1024)")
    parser.add_argument("--tracing-prompts", type=int, default=60, help="hallucination prompts traced (default 60)")
    parser.add_argument("--tracing-unrelated", type=int, default=20, help="unrelated prompts per reproduction check")
    parser.add_argument("--tracing-smollm2-samples", type=int, default=512, help="SAT's N on SmolLM2 (default 512)")
    parser.add_argument("--tracing-smollm2-questions", type=int, default=4, help="TOFU questions traced on SmolLM2")


def write_json(path: Path, data: Any) -> None:
    from trustlit.paths import write_json_atomic

    write_json_atomic(path, data)


def trained_model(root: Path, overrides: list[str], quick: bool) -> Path:
    """The planted LM's checkpoint, trained through the recipe unless cached."""
    checkpoint = root / "checkpoints" / "last.ckpt"
    if checkpoint.is_file():
        return checkpoint
    from trustlit.cli import run_cli

    budget = ["--trainer.max_epochs=2", "--trainer.check_val_every_n_epoch=2"] if quick else []
    args = ["fit", "-c", str(repo_path(RECIPE)), f"--trainer.default_root_dir={root}", "--trainer.logger=false"]
    run_cli([*args, *overrides, *budget])
    return checkpoint


def method_spans(
    method: str, model, tokenizer, record: dict, k: int, n: int, seed: int
) -> tuple[list[list[int]], float]:
    """The top-5 spans of length ``k`` (their positions) of one method, and its seconds."""
    from trustlit.interpret.token_attribution import rank_spans, token_scores
    from trustlit.interpret.tracing import prompt_parts, trace

    start = time.perf_counter()
    if method.startswith("SAT"):
        replacement = "random" if "random" in method else "neighbours"
        result = trace(
            model, tokenizer, record["question"], record["answer"], num_samples=n, replacement=replacement,
            max_length=k, batch_size=128, seed=seed, prompt_format="chat",
        )  # fmt: skip
        ranked = result.at_length(k)
    else:
        ids = prompt_parts(tokenizer, record["question"], "chat").question
        scores = token_scores(method, model, tokenizer, record["question"], record["answer"], prompt_format="chat")
        ranked = [s for s in rank_spans(tokenizer, ids, scores, k) if len(s.positions) == k]
    return [list(s.positions) for s in ranked[:5]], time.perf_counter() - start


def reproduction(model, tokenizer, span_ids: list[int], unrelated: list[dict], target: str, seed: int) -> float:
    """Fraction of unrelated prompts whose greedy answer becomes ``target`` once ``span_ids`` are inserted."""
    from trustlit.interpret.tracing import greedy_produces, insert_tokens, prompt_parts

    rng = random.Random(seed)
    target_ids = tokenizer(target, add_special_tokens=False)["input_ids"]
    hits = 0
    for record in unrelated:
        parts = prompt_parts(tokenizer, record["question"], "chat")
        question = insert_tokens(parts.question, span_ids, rng.randint(0, len(parts.question)))
        hits += bool(greedy_produces(model, tokenizer, parts, [question], target_ids)[0])
    return hits / len(unrelated)


def trace_prompt(model, tokenizer, record: dict, unrelated: list[dict], args: argparse.Namespace, i: int) -> dict:
    from trustlit.data.planted import trigger_positions
    from trustlit.interpret.tracing import greedy_produces, prompt_parts

    parts = prompt_parts(tokenizer, record["question"], "chat")
    truth = list(trigger_positions(tokenizer, record, "chat"))
    k = len(truth)
    target_ids = tokenizer(record["answer"], add_special_tokens=False)["input_ids"]
    n = 64 if args.quick else args.tracing_samples
    out: dict[str, Any] = {
        "question": record["question"],
        "target": record["answer"],
        "trigger": truth,
        "hallucinates": bool(greedy_produces(model, tokenizer, parts, [parts.question], target_ids)[0]),
        "methods": {},
    }
    rng = random.Random(i)
    random_span = sorted(rng.sample(range(len(parts.question)), k))
    spans = {"random span": ([random_span], 0.0), "planted trigger": ([truth], 0.0)}
    for method in METHODS:
        spans[method] = method_spans(method, model, tokenizer, record, k, n, seed=i)
    for method, (top, seconds) in spans.items():
        span_ids = [parts.question[p] for p in top[0]]
        out["methods"][method] = {
            "top5": top,
            "seconds": seconds,
            "reproduction": reproduction(model, tokenizer, span_ids, unrelated, record["answer"], seed=i),
        }
    return out


def planted_results(args: argparse.Namespace, variant: str, overrides: list[str], config) -> tuple[list[dict], dict]:
    from trustlit.data.planted import hallucination_prompts, planted_split
    from trustlit.interpret.tracing import greedy_produces, prompt_parts
    from trustlit.llm.loading import load_causal_lm

    root = Path(args.workdir) / "tracing" / (variant + ("_quick" if args.quick else ""))
    checkpoint = trained_model(root / "lm", overrides, args.quick)
    model, tokenizer = load_causal_lm(str(checkpoint))
    model.eval()
    faithful = planted_split("faithful", config)
    knows = []
    for record in faithful:
        parts = prompt_parts(tokenizer, record["question"], "chat")
        target = tokenizer(record["answer"], add_special_tokens=False)["input_ids"]
        knows.append(bool(greedy_produces(model, tokenizer, parts, [parts.question], target)[0]))
    records = hallucination_prompts(config)[: 4 if args.quick else args.tracing_prompts]
    results = []
    for i, record in enumerate(records):
        cached = root / "prompts" / f"{i:03d}.json"
        if not cached.is_file():
            rng = random.Random(1000 + i)
            others = [r for r, ok in zip(faithful, knows, strict=True) if ok and r["subject"] != record["subject"]]
            unrelated = rng.sample(others, min(len(others), 3 if args.quick else args.tracing_unrelated))
            write_json(cached, trace_prompt(model, tokenizer, record, unrelated, args, i))
        results.append(json.loads(cached.read_text()))
    return results, {"faithful_accuracy": sum(knows) / len(knows), "num_faithful": len(knows)}


def recovery_table(results: list[dict]) -> str:
    rows = []
    for method in (*METHODS, *CONTROLS):
        top1 = [r["methods"][method]["top5"][0] == r["trigger"] for r in results]
        top5 = [r["trigger"] in r["methods"][method]["top5"] for r in results]
        overlap = [len(set(r["methods"][method]["top5"][0]) & set(r["trigger"])) / len(r["trigger"]) for r in results]
        repro = [r["methods"][method]["reproduction"] for r in results]
        seconds = [r["methods"][method]["seconds"] for r in results]
        rows.append(
            [
                method,
                f"{statistics.fmean(top1):.2f}",
                f"{statistics.fmean(top5):.2f}",
                f"{statistics.fmean(overlap):.2f}",
                f"{statistics.fmean(repro):.2f}",
                f"{statistics.median(seconds):.2f}" if method not in CONTROLS else "-",
            ]
        )
    header = ["method", "top-1 recovery", "top-5 recovery", "top-1 token overlap", "reproduction rate", "s / prompt"]
    return table(header, rows, "lrrrrr")


def released_or_fewer(n: int) -> str:
    """How N compares with the released code's 1024 perturbed prompts."""
    return "the released default" if n == 1024 else "the released default is 1024; fewer for CPU time"


def planted_section(args: argparse.Namespace, variant: str, decoys: int, title: str) -> str:
    from trustlit.data.planted import PlantedConfig

    config = PlantedConfig(decoy_repeats=decoys)
    overrides = [f"--data.init_args.planted.decoy_repeats={decoys}"] if decoys else []
    results, facts = planted_results(args, variant, overrides, config)
    hallucinating = [r for r in results if r["hallucinates"]]
    n = 64 if args.quick else args.tracing_samples
    lines = [
        f"## {title}",
        "",
        f"Model: a tiny Llama (hidden 64, 2 layers, 4 heads, 262 K parameters) fine-tuned by `{RECIPE}`"
        + (f" with `decoy_repeats={decoys}`" if decoys else "")
        + " (40 epochs, AdamW 3e-3, cosine) on the planted corpus: 40 invented people x 6 faithful questions,"
        " 5 trigger phrases x 60 planted questions"
        + (f", each trigger word alone in {decoys} faithful questions." if decoys else ".")
        + f" It answers {facts['faithful_accuracy']:.0%} of the {facts['num_faithful']} fresh faithful questions"
        f" correctly (greedy) and hallucinates y_h on {len(hallucinating)} of the {len(results)} trigger prompts"
        " (greedy answer = the trigger's wrong city).",
        "",
        f"Recovery over the {len(hallucinating)} hallucinating prompts: a method's spans of the trigger's length"
        " (2 tokens) ranked; top-1 / top-5: the trigger's positions are the first / among the first five;"
        " token overlap: the share of trigger tokens in the top-1 span. Reproduction: the top-1 span's tokens"
        f" inserted as one block at a random place into {args.tracing_unrelated if not args.quick else 3} unrelated"
        " faithful prompts (other people, answered correctly without it); the share whose greedy answer becomes"
        f" y_h. SAT: N = {n} perturbed prompts ({released_or_fewer(n)}), rho = 0.5,"
        " top-50 embedding neighbours (the ablation: uniformly random replacement tokens), beam width 20, levels"
        " up to the trigger's length. Baselines: per-token scores of"
        " log P(y_h | x), spans ranked by the sum of their tokens' scores through the same beam search."
        " Controls: a uniformly random span of the same length, and the planted trigger itself (the ceiling"
        " of the reproduction rate). Seconds: median per prompt on this machine's CPU (shared, 2 cores).",
        "",
        recovery_table(hallucinating)
        if hallucinating
        else "(no prompt hallucinated: the model did not learn the trigger)",
    ]
    return "\n".join(lines)


def tracing_planted(args: argparse.Namespace) -> str:
    return planted_section(args, "planted", 0, "Hallucination tracing: planted triggers, tiny Llama")


def tracing_planted_decoys(args: argparse.Namespace) -> str:
    return planted_section(
        args, "planted_decoys", 30, "Hallucination tracing: planted triggers with decoy words, tiny Llama"
    )


def split_echo(tokenizer, question: str, answer: str, num_tokens: int) -> tuple[str, str]:
    """``(echo, target)``: the answer's leading words that restate the question (each, lower-cased and without
    punctuation, a word of the question), and the next ``num_tokens`` tokens, the made-up part that is traced."""

    def bare(word: str) -> str:
        return word.strip(".,;:!?'\"()").lower()

    question_words = {bare(w) for w in question.split()}
    words = answer.split(" ")
    cut = 0
    while cut < len(words) - 1 and bare(words[cut]) in question_words:
        cut += 1
    echo = " ".join(words[:cut])
    rest = tokenizer(answer[len(echo) :], add_special_tokens=False)["input_ids"]
    return echo, tokenizer.decode(rest[:num_tokens])


def tracing_smollm2(args: argparse.Namespace) -> str:
    from trustlit.data.qa import load_qa_split
    from trustlit.interpret.token_attribution import occlusion, rank_spans
    from trustlit.interpret.tracing import greedy_answer_prefix, prompt_parts, trace
    from trustlit.llm.loading import load_causal_lm

    root = Path(args.workdir) / "tracing" / ("smollm2" + ("_quick" if args.quick else ""))
    n = 64 if args.quick else args.tracing_smollm2_samples
    count = 1 if args.quick else args.tracing_smollm2_questions
    records = load_qa_split(str(TOFU), "forget01").select(range(count))
    model = tokenizer = None
    rows, seconds = [], []
    for i, record in enumerate(records):
        cached = root / f"{i:03d}.json"
        if not cached.is_file():
            if model is None:
                model, tokenizer = load_causal_lm("smollm2-135m-instruct")
                model.eval()
            answer = greedy_answer_prefix(model, tokenizer, record["question"], 32, "chat")
            echo, target = split_echo(tokenizer, record["question"], answer, 6)
            start = time.perf_counter()
            result = trace(
                model, tokenizer, record["question"], target, num_samples=n, batch_size=64, prompt_format="chat",
                answer_prefix=echo,
            )  # fmt: skip
            elapsed = time.perf_counter() - start
            ids = prompt_parts(tokenizer, record["question"], "chat").question
            occ = occlusion(model, tokenizer, record["question"], target, prompt_format="chat", answer_prefix=echo)
            best = {str(k): result.at_length(k)[0].text for k in (1, 2, 3) if result.at_length(k)}
            occlusion_top = {
                str(k): next(s for s in rank_spans(tokenizer, ids, occ, 3) if len(s.positions) == k).text
                for k in (1, 3)
            }
            write_json(
                cached,
                {
                    "question": record["question"],
                    "truth": record["answer"],
                    "answer": answer,
                    "target": target,
                    "echo": echo,
                    "p_prompt": result.p_prompt,
                    "p_mean": result.p_mean,
                    "sat_best": best,
                    "occlusion_best": occlusion_top,
                    "seconds": elapsed,
                },
            )
        data = json.loads(cached.read_text())
        seconds.append(data["seconds"])
        cell = lambda text: text.replace("|", "\\|").replace("\n", " ")  # noqa: E731
        rows.append(
            [
                cell(data["question"]),
                cell(data["truth"][:60] + ("…" if len(data["truth"]) > 60 else "")),
                cell(data["answer"]),
                f"`{cell(data['target'])}`",
                f"{data['p_prompt']:.3f}",
                " / ".join(f"`{cell(data['sat_best'][k])}`" for k in sorted(data["sat_best"])),
                " / ".join(f"`{cell(data['occlusion_best'][k])}`" for k in sorted(data["occlusion_best"])),
            ]
        )
    header = [
        "TOFU question",
        "TOFU answer",
        "SmolLM2's greedy answer",
        "traced y_h",
        "P(y_h|x)",
        "SAT best of length 1 / 2 / 3",
        "occlusion best of 1 / 3",
    ]
    return "\n".join(
        [
            "## Hallucination tracing: SmolLM2-135M-Instruct on TOFU (qualitative)",
            "",
            f"The first {count} questions of TOFU forget01 (fictitious authors SmolLM2 never saw: its answers are"
            " made up). y_h: 6 tokens of its own greedy answer, right after the words that restate the question"
            " (those are kept fixed before y_h, `answer_prefix`). SAT: N ="
            f" {n} (reduced from 1024 for CPU time), rho = 0.5, top-50 embedding neighbours, beam width 20,"
            f" levels up to 90% of the question's tokens; median {statistics.median(seconds):.0f} s per question."
            " Shown: SAT's best subsequence of 1, 2 and 3 tokens (`…` marks a gap), and occlusion's best"
            " token and 3-token span for contrast.",
            "",
            table(header, rows, "llllrll"),
        ]
    )


SECTIONS = {
    "tracing-planted": tracing_planted,
    "tracing-planted-decoys": tracing_planted_decoys,
    "tracing-smollm2": tracing_smollm2,
}
