"""Intrinsic-dimension sections of ``benchmarks/interpret.py`` (``docs/benchmarks/interpret.md``).

- ``id-estimators``: TwoNN, MLE and GRIDE (:mod:`trustlit.interpret.intrinsic_dimension`) against
  scikit-dimension (``skdim.id.TwoNN``, ``MLE``, ``GRIDE``) and DADApy (``compute_id_2NN``,
  ``return_id_scaling_gride``; run in its own venv, ``.venv-peers``, since it needs numpy < 2) on the
  same points: manifolds of known dimension (2000 points) and 10^4 points in D = 576 (SmolLM2's width).
  Estimates and seconds (median of ``--id-repeats``), and the peer / ours time ratio.
- ``id-layers``: the experiment of Joshi, Bhatt, Modi (NeurIPS 2025, arXiv 2511.20315) on CPU: TOFU as
  four-option MCQA (:class:`trustlit.data.MCQADataModule`) on ``smollm2-135m-instruct`` (30 layers) and
  on a randomly initialised tiny Llama: per layer, the ID of the last-prompt-token residual state by each
  estimator and the 5-fold cross-validated accuracy of a logistic-regression probe for the correct
  letter, and the model's own accuracy (argmax of the letters' log-probabilities). A table and a figure
  (``docs/benchmarks/interpret_id_<model>.png``). The representations are cached per batch under
  ``<workdir>/id/`` (a rerun resumes), the estimates and probes per model.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from benchmarks.common import REPO_ROOT, TOFU, mean_std, table

PEERS_PYTHON = Path(os.environ.get("TRUSTLIT_PEERS_PYTHON", REPO_ROOT / ".venv-peers" / "bin" / "python"))
SPLITS = ("forget10_perturbed", "retain_perturbed")
ESTIMATORS = ("twonn", "mle", "gride")
MODELS = {
    "smollm2": {"name_or_path": "smollm2-135m-instruct"},
    "tiny": {"name_or_path": "tiny-llama", "tiny": {"hidden_size": 64, "num_layers": 4, "num_heads": 4}},
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--id-items", type=int, default=800, help="TOFU MCQA items (half per split; default 800)")
    parser.add_argument("--id-batch-size", type=int, default=8, help="prompts per forward (default 8)")
    parser.add_argument("--id-repeats", type=int, default=3, help="timing repeats per estimator (default 3)")
    parser.add_argument("--id-points", type=int, default=10_000, help="points of the D = 576 timing cloud")


# -- id-estimators ------------------------------------------------------------------------------


def gaussian_subspace(d: int, n: int, ambient: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    basis = np.linalg.qr(rng.normal(size=(ambient, d)))[0]
    return rng.normal(size=(n, d)) @ basis.T


def synthetic_clouds(n_large: int) -> dict[str, tuple[np.ndarray, int | None]]:
    from sklearn.datasets import make_swiss_roll

    sphere = np.random.default_rng(0).normal(size=(2000, 4))
    sphere /= np.linalg.norm(sphere, axis=1, keepdims=True)
    large = gaussian_subspace(16, n_large, 576, seed=1) + 0.01 * np.random.default_rng(2).normal(size=(n_large, 576))
    return {
        "subspace d=2 in R^100": (gaussian_subspace(2, 2000, 100), 2),
        "subspace d=5 in R^100": (gaussian_subspace(5, 2000, 100), 5),
        "subspace d=10 in R^100": (gaussian_subspace(10, 2000, 100), 10),
        "swiss roll (d=2)": (make_swiss_roll(2000, random_state=0)[0], 2),
        "sphere S^3 in R^4": (sphere, 3),
        f"N={n_large}: d=16 subspace of R^576 + noise 0.01": (large.astype(np.float32), 16),
    }


def timed(function: Callable[[], float], repeats: int) -> tuple[float, float]:
    """(estimate, median seconds over ``repeats`` calls)."""
    seconds, value = [], float("nan")
    for _ in range(repeats):
        began = time.perf_counter()
        value = function()
        seconds.append(time.perf_counter() - began)
    return value, statistics.median(seconds)


DADAPY_TIMING = """
import json, sys, time, statistics
import numpy as np
from dadapy import Data
X = np.load(sys.argv[1]).astype(np.float64)
repeats = int(sys.argv[2])
out = {}
for name, call in (("twonn", lambda: Data(coordinates=X).compute_id_2NN(mu_fraction=0.9)[0]),
                   ("gride", lambda: Data(coordinates=X).return_id_scaling_gride(range_max=2)[0][0])):
    seconds = []
    for _ in range(repeats):
        began = time.perf_counter(); value = float(call()); seconds.append(time.perf_counter() - began)
    out[name] = [value, statistics.median(seconds)]
print(json.dumps(out))
"""


def dadapy_timing(X: np.ndarray, repeats: int, workdir: Path, threads: int) -> dict[str, list[float]]:
    if not PEERS_PYTHON.is_file():
        raise FileNotFoundError(f"DADApy's venv {PEERS_PYTHON} is missing: `make peers` creates it")
    path = workdir / "points.npy"
    np.save(path, X)
    threads_env = {name: str(threads) for name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")}
    environment = {**os.environ, **threads_env, "JAX_PLATFORMS": "cpu", "PYTHONWARNINGS": "ignore"}
    command = [str(PEERS_PYTHON), "-c", DADAPY_TIMING, str(path), str(repeats)]
    result = subprocess.run(command, capture_output=True, text=True, env=environment, check=False)
    if result.returncode != 0:
        raise RuntimeError(f"DADApy timing failed: {result.stderr[-1500:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def estimators_section(args: argparse.Namespace) -> str:
    import skdim

    from trustlit.interpret.intrinsic_dimension import gride, mle, twonn

    workdir = args.workdir / "id"
    workdir.mkdir(parents=True, exist_ok=True)
    repeats = 1 if args.quick else args.id_repeats
    ours = {"twonn": twonn, "mle": mle, "gride": gride}
    peers = {
        "twonn": lambda X: skdim.id.TwoNN(discard_fraction=0.1).fit(X).dimension_,
        "mle": lambda X: skdim.id.MLE().fit(X, n_neighbors=20).dimension_,
        "gride": lambda X: skdim.id.GRIDE().fit(X).dimension_,
    }
    rows = []
    for cloud, (X, truth) in synthetic_clouds(2000 if args.quick else args.id_points).items():
        dadapy = dadapy_timing(X, repeats, workdir, args.threads)
        for name in ESTIMATORS:
            value, seconds = timed(lambda n=name, X=X: ours[n](X), repeats)
            peer_value, peer_seconds = timed(lambda n=name, X=X: peers[n](X), repeats)
            cells = [cloud, str(truth), name, f"{value:.3f}", f"{seconds:.2f}", f"{peer_value:.3f}"]
            cells += [f"{peer_seconds:.2f}", f"{peer_seconds / seconds:.1f}"]
            if name in dadapy:
                d_value, d_seconds = dadapy[name]
                cells += [f"{d_value:.3f}", f"{d_seconds:.2f}", f"{d_seconds / seconds:.1f}"]
            else:
                cells += ["-", "-", "-"]
            rows.append(cells)
    header = ["points", "true d", "estimator", "ours", "ours s", "skdim", "skdim s", "skdim/ours"]
    header += ["DADApy", "DADApy s", "DADApy/ours"]
    return f"""## Intrinsic-dimension estimators against scikit-dimension and DADApy

Same points for every implementation; estimates, then seconds as the median of {repeats} run(s) and the
peer's time over ours. TwoNN discards 10 % of the ratios (Facco et al.), MLE uses k = 20 (MacKay–Ghahramani
pooling, k - 1 normalisation: skdim `MLE(unbiased=False)`, `comb="mle"`), GRIDE n1 = 1, n2 = 2 (DADApy's
`return_id_scaling_gride` first scale; skdim `GRIDE()`). DADApy 0.3.4 has no MLE. Ours: float32 candidate
search by chunked matmul + topk, exact float64 re-ranking (`neighbour_distances`); skdim: scikit-learn
`NearestNeighbors` (MLE, GRIDE) or a full sort of every distance row (TwoNN when D > 25); DADApy: its own
neighbour search (`maxk` = 100 neighbours) in a separate process whose start-up and import (jax) are not timed.
torch threads {torch.get_num_threads()}; scikit-learn and numpy use their own thread pools.

{table(header, rows, "lllrrrrrrrr")}
"""


# -- id-layers ----------------------------------------------------------------------------------


def mcqa_items(tokenizer: Any, items: int) -> list[dict[str, Any]]:
    """The first ``items / 2`` MCQA items of each split, encoded for ``tokenizer`` (chat format)."""
    from trustlit.data.mcqa import MCQADataModule

    data = MCQADataModule(
        source=str(TOFU), train_split=None, eval_splits=list(SPLITS), prompt_format="chat",
        max_length=2048, max_samples=max(1, items // len(SPLITS)),
    )  # fmt: skip
    data.tokenizer = tokenizer
    data.setup("validate")
    collate = [data.collator(split) for split in SPLITS]
    return [
        {"sample": sample, "collate": collate[d], "split": d}
        for d, dataset in enumerate(data.eval_datasets)
        for sample in dataset.samples
    ]


def harvest(model_name: str, items: int, batch_size: int, cache: Path) -> dict[str, Any]:
    """Per-layer last-prompt-token states, correct and predicted letters; cached per batch under ``cache``."""
    from trustlit.interpret.layer_dimension import batch_representations
    from trustlit.llm.anatomy import decoder_layers
    from trustlit.llm.loading import load_causal_lm

    final = cache / "representations.pt"
    if final.is_file():
        return torch.load(final)
    spec = MODELS[model_name]
    model, tokenizer = load_causal_lm(spec["name_or_path"], tiny=spec.get("tiny"))
    model.eval()
    layers = list(range(len(decoder_layers(model))))
    encoded = mcqa_items(tokenizer, items)
    order = sorted(range(len(encoded)), key=lambda i: len(encoded[i]["sample"]["input_ids"]))  # less padding
    batches = [order[i : i + batch_size] for i in range(0, len(order), batch_size)]
    cache.mkdir(parents=True, exist_ok=True)
    began, done = time.perf_counter(), 0
    for number, members in enumerate(batches):
        path = cache / f"batch_{number:04d}.pt"
        if path.is_file():
            continue
        batch = encoded[members[0]]["collate"]([encoded[i]["sample"] for i in members])
        states, scores = batch_representations(model, batch, layers)
        part = {
            "states": torch.stack([states[layer] for layer in layers], dim=1),  # [B, L, D]
            "correct": batch["correct"],
            "predicted": scores.argmax(dim=1),
            "tokens": int(batch["attention_mask"].sum()),
        }
        torch.save(part, path)
        done += 1
        if done % 10 == 0:
            print(f"{model_name}: {number + 1}/{len(batches)} batches, {time.perf_counter() - began:.0f} s", flush=True)
    parts = [torch.load(cache / f"batch_{number:04d}.pt") for number in range(len(batches))]
    result = {
        "layers": layers,
        "states": torch.cat([p["states"] for p in parts]),
        "correct": torch.cat([p["correct"] for p in parts]),
        "predicted": torch.cat([p["predicted"] for p in parts]),
        "tokens": sum(p["tokens"] for p in parts),
        "forward_seconds": time.perf_counter() - began if done == len(batches) else None,
    }
    torch.save(result, final)
    return result


def analyse(model_name: str, harvested: dict[str, Any], cache: Path) -> dict[str, Any]:
    """ID per layer and estimator (the Callback's pure part), the probe per layer, the model's accuracy."""
    from trustlit.interpret.layer_dimension import layer_estimates
    from trustlit.interpret.probes import probe_accuracy

    path = cache / "analysis.json"
    if path.is_file():
        return json.loads(path.read_text())
    layers = harvested["layers"]
    states = {layer: harvested["states"][:, i] for i, layer in enumerate(layers)}
    began = time.perf_counter()
    ids = layer_estimates(states, ESTIMATORS)
    id_seconds = time.perf_counter() - began
    began = time.perf_counter()
    probes = {layer: probe_accuracy(x, harvested["correct"], folds=5) for layer, x in states.items()}
    probe_seconds = time.perf_counter() - began
    result = {
        "model": model_name,
        "num_samples": len(harvested["correct"]),
        "tokens": harvested["tokens"],
        "forward_seconds": harvested["forward_seconds"],
        "layers": layers,
        "id": {name: {str(k): v for k, v in values.items()} for name, values in ids.items()},
        "probe": {str(k): v for k, v in probes.items()},
        "accuracy": float((harvested["predicted"] == harvested["correct"]).double().mean()),
        "majority": float(torch.bincount(harvested["correct"]).max() / len(harvested["correct"])),
        "id_seconds": id_seconds,
        "probe_seconds": probe_seconds,
    }
    path.write_text(json.dumps(result, indent=1))
    return result


def profile_summary(result: dict[str, Any]) -> str:
    """Where each estimator's ID peaks, whether it is low-high-low, and whether (where) the probe reads the answer."""
    layers = result["layers"]
    probe = [statistics.fmean(result["probe"][str(layer)]) for layer in layers]
    best = max(probe)
    readable = best > result["majority"] + 0.05
    first_good = next(layer for layer, p in zip(layers, probe, strict=True) if p >= best - 0.02)
    lines = [
        f"- probe: best {best:.3f} at layer {layers[probe.index(best)]}; "
        + (
            f"first layer within 0.02 of it: {first_good}."
            if readable
            else f"never 0.05 above the majority letter ({result['majority']:.3f}): no layer linearly encodes the "
            "correct option, so where ID peaks relative to the decision cannot be read from this run."
        )
    ]
    edge = max(1, len(layers) // 6)
    for name, values in result["id"].items():
        series = [values[str(layer)] for layer in layers]
        top = series.index(max(series))
        early, late = statistics.fmean(series[:edge]), statistics.fmean(series[-edge:])
        middle = edge <= top < len(layers) - edge
        low_high_low = middle and max(series) > 1.1 * early and max(series) > 1.1 * late
        lines.append(
            f"- {name}: peak {max(series):.1f} at layer {layers[top]}; mean of the first {edge} layers {early:.1f}, "
            f"of the last {edge} {late:.1f}: low-high-low {'yes' if low_high_low else 'no'}."
        )
    return "\n".join(lines)


def plot(result: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    layers = result["layers"]
    figure, axis = plt.subplots(figsize=(8, 4.2))
    for name, values in result["id"].items():
        axis.plot(layers, [values[str(layer)] for layer in layers], marker="o", markersize=3, label=f"ID ({name})")
    axis.set_xlabel("decoder layer (residual stream after the block)")
    axis.set_ylabel("intrinsic dimension")
    second = axis.twinx()
    probe = [statistics.fmean(result["probe"][str(layer)]) for layer in layers]
    second.plot(layers, probe, color="black", linestyle="--", label="probe accuracy (5-fold)")
    second.axhline(result["accuracy"], color="grey", linestyle=":", label="model's own accuracy")
    second.axhline(0.25, color="lightgrey", linestyle="-", linewidth=0.8, label="chance (4 options)")
    second.set_ylim(0, 1)
    second.set_ylabel("accuracy")
    axis.legend(loc="upper left", fontsize=8)
    second.legend(loc="upper right", fontsize=8)
    axis.set_title(f"TOFU MCQA, {result['model']}: ID of the last prompt token (N = {result['num_samples']})")
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)


def layer_table(result: dict[str, Any]) -> str:
    rows = []
    for layer in result["layers"]:
        cells = [str(layer), *(f"{result['id'][name][str(layer)]:.2f}" for name in result["id"])]
        rows.append([*cells, mean_std(result["probe"][str(layer)], 3)])
    return table(["layer", *(f"ID {name}" for name in result["id"]), "probe accuracy (5 folds)"], rows, "rrrrr")


def layers_section(args: argparse.Namespace) -> str:
    items = 48 if args.quick else args.id_items
    parts = []
    for model_name in ("smollm2", "tiny"):
        cache = args.workdir / "id" / f"{model_name}_n{items}"
        result = analyse(model_name, harvest(model_name, items, args.id_batch_size, cache), cache)
        figure = REPO_ROOT / "docs" / "benchmarks" / f"interpret_id_{model_name}{'_quick' if args.quick else ''}.png"
        plot(result, figure)
        forward = f"{result['forward_seconds']:.0f} s" if result["forward_seconds"] else "cached over several runs"
        name, r = MODELS[model_name]["name_or_path"], result
        timing = f"forward {forward}, estimators {r['id_seconds']:.0f} s, probes {r['probe_seconds']:.0f} s"
        accuracy = f"**{r['accuracy']:.3f}** (majority letter {r['majority']:.3f}, chance 0.25)"
        parts.append(
            f"""### {name} ({len(r["layers"])} layers)

N = {r["num_samples"]} items ({r["tokens"]} tokens); {timing}. The model's own accuracy (argmax over the four
letters' log-probabilities at the last prompt token): {accuracy}.

![ID per layer, {model_name}]({figure.name})

{profile_summary(r)}

{layer_table(r)}
"""
        )
    body = "\n".join(parts)
    return f"""## Intrinsic dimension per layer on TOFU MCQA (Joshi, Bhatt, Modi 2025, on CPU)

TOFU's `forget10_perturbed` and `retain_perturbed` (the first {items // 2} of each) as four-option
questions: the paraphrased answer and three perturbed ones, shuffled with seed 0 (`MCQADataModule`, chat
prompt; the correct letter is spread over A–D). For every decoder layer, the residual stream after the
block at the last prompt token (the state that predicts the letter), through the hooks the
`IntrinsicDimension` Callback uses (`batch_representations`); its pure part `layer_estimates` gives TwoNN,
MLE (k = 20) and GRIDE (n1 = 1, n2 = 2). Probe: standardised features, logistic regression (C = 1),
5 stratified folds, mean ± std over the folds, target the correct option index. Stand-ins and scale: TOFU
(fictitious authors the base model never saw) instead of the paper's MMLU-style sets, one 135M model, a
few hundred items instead of thousands, and a linear probe instead of the paper's projection of each
layer to the vocabulary. The tiny Llama is randomly initialised (no training): a control whose probe should
sit near chance. "Low-high-low" below means: the estimator's largest value lies outside the first and the
last sixth of the layers and exceeds by 10 % both the mean over the first sixth and the mean over the last.
The stages are cached under `--workdir`: the seconds quoted are those of the run that computed each stage
(the SmolLM2 forward and probes ran while other jobs kept the 1-minute load at 8-10 on the 2 cores).

{body}"""


SECTIONS: dict[str, Callable[[argparse.Namespace], str]] = {
    "id-estimators": estimators_section,
    "id-layers": layers_section,
}
