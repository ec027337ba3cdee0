"""ProxySPEX benchmark: faithfulness R^2 against the LASSO (marginal) baseline and KernelSHAP's additive game.

Sections (composed by ``benchmarks/attribution.py`` into ``docs/benchmarks/attribution.md``):

- ``attribution-proxyspex-planted``: planted sparse hierarchical games with known Möbius coefficients (every
  subset of a planted term is planted), n = 40; R^2 on 10,000 held-out uniform masks at budgets {250, 500, 1000,
  2000}, and recovery of the planted support (precision / recall of the coefficients above a threshold) and of the
  coefficients (relative squared error).
- ``attribution-proxyspex-smollm2``: the LLM game of SmolLM2-135M-Instruct on TOFU passages (the game of
  ``TokenInteractions``): players = the 30-60 words of a TOFU answer given as the passage of its question,
  v(S) = log p(model's own greedy answer | words in S). Every method is scored on one shared set of held-out
  uniform masks per context.

Following the paper (Butler et al. 2025, arXiv 2505.17495) and the SPEX code it compares with: masks uniform over
{0,1}^n, R^2 of the reconstructed game on held-out uniform masks (SPEX's ``estimate_r2``), budgets counted in
distinct model evaluations, and LASSO the marginal baseline (``lasso_attribution``). KernelSHAP enters through its
additive game v(0) + sum_{i in S} phi_i (``additive_faithfulness``). Game evaluations of the LLM are cached on disk
under ``<workdir>/proxyspex/`` (one file per context), so an interrupted run resumes without the model.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.common import TOFU, table

PLANTED_BUDGETS = (250, 500, 1000, 2000)
LLM_BUDGETS = (250, 500, 1000)
THRESHOLD = 0.1  # a recovered coefficient: |a_T| above this (planted magnitudes are at least 0.5)
METHODS = ("ProxySPEX", "LASSO", "KernelSHAP (additive)", "LeverageSHAP (additive)")
# KernelSHAP with replacement draws nested coalitions across budgets (one seed), so the cached LLM game pays for the
# largest budget only; LeverageSHAP's without-replacement design is not nested and is left out there for CPU time.
LLM_METHODS = METHODS[:3]
TARGET_TOKENS = 12


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--planted-games", type=int, default=3, help="planted games (default 3)")
    parser.add_argument("--llm-contexts", type=int, default=2, help="TOFU contexts for the SmolLM2 game (default 2)")
    parser.add_argument("--llm-holdout", type=int, default=500, help="shared held-out masks per context (default 500)")


# -- planted games --------------------------------------------------------------------------------


def planted_mobius(n: int, seed: int) -> dict[frozenset[int], float]:
    """A sparse hierarchical game: 10 main effects, 2 triples on 6 of their players, and the triples' 6 pairs;
    coefficients ±U(0.5, 2) x 2^(|T| - 1)."""
    rng = np.random.default_rng(seed)

    def coefficient() -> float:
        return float(rng.choice([-1.0, 1.0]) * rng.uniform(0.5, 2.0))

    mains = [int(i) for i in rng.choice(n, size=10, replace=False)]
    triples = [frozenset(mains[0:3]), frozenset(mains[3:6])]
    pairs = {frozenset(p) for t in triples for p in _pairs_of(t)}
    mobius = {frozenset(): 1.0}
    for support in [*(frozenset([i]) for i in mains), *sorted(pairs, key=sorted), *triples]:
        # a Möbius term a_T puts a_T / 2^|T| on its top Fourier coefficient: scaling by 2^(|T|-1) gives every planted
        # term a comparable share of the variance under uniform masks (unscaled pairs and triples hold under 5 %)
        mobius[support] = coefficient() * 2.0 ** (len(support) - 1)
    return mobius


def _pairs_of(triple: frozenset[int]) -> list[tuple[int, int]]:
    a, b, c = sorted(triple)
    return [(a, b), (a, c), (b, c)]


class PlantedGame:
    def __init__(self, n: int, mobius: dict[frozenset[int], float]) -> None:
        self.n_players, self.mobius = n, mobius

    def __call__(self, masks):
        from trustlit.attribution.fourier import mobius_game

        return mobius_game(self.mobius, masks)


def recovery(truth: dict[frozenset[int], float], estimate: dict[frozenset[int], float]) -> dict[str, float]:
    """Precision / recall of the non-empty support above THRESHOLD, and the relative squared coefficient error."""
    found = {t for t, a in estimate.items() if t and abs(a) > THRESHOLD}
    planted = {t for t in truth if t}
    keys = (set(truth) | set(estimate)) - {frozenset()}
    error = sum((estimate.get(t, 0.0) - truth.get(t, 0.0)) ** 2 for t in keys) / sum(truth[t] ** 2 for t in planted)
    hits = len(found & planted)
    out = {"precision": hits / len(found) if found else float("nan"), "recall": hits / len(planted), "error": error}
    for order in (1, 2, 3):  # recall per interaction order: the energy cut drops weak high-order terms first
        of_order = {t for t in planted if len(t) == order}
        out[f"recall{order}"] = len(found & of_order) / len(of_order)
    return out


def score_methods(value: Any, budget: int, holdout, truth_holdout, methods: tuple[str, ...]) -> dict[str, dict]:
    """R^2 of ``methods`` on the shared held-out masks (seed 0), their Möbius coefficients, evaluations and seconds.

    ProxySPEX and LASSO are asked for the minimum of 2 held-out masks of their own (their R^2 is not used)."""
    from trustlit.attribution import kernel_shap
    from trustlit.attribution.fourier import mobius_game
    from trustlit.attribution.linear import additive_faithfulness, additive_game, lasso_attribution
    from trustlit.attribution.proxy_spex import proxyspex, r_squared

    out = {}
    for method in methods:
        start = time.perf_counter()
        if method in ("ProxySPEX", "LASSO"):
            fit = proxyspex if method == "ProxySPEX" else lasso_attribution
            result = fit(value, budget, seed=0, n_holdout=2)
            r2, mobius, spent = r_squared(truth_holdout, result(holdout)), result.mobius, result.n_evaluations
        else:
            kwargs = {"sampling": "kernel", "replacement": True} if method.startswith("Kernel") else {}
            result = kernel_shap(value, budget, seed=0, **kwargs)
            r2, mobius, spent = (
                additive_faithfulness(result, value, holdout),
                additive_game(result),
                result.n_evaluations,
            )
        seconds = time.perf_counter() - start
        # R^2 once the reconstruction's mean offset on the held-out masks is removed: an additive Shapley game is
        # exact at v(0) and v(N) but can be far off on average at half-size coalitions when players interact
        estimate = mobius_game(mobius, holdout)
        centred = r_squared(truth_holdout - truth_holdout.mean(), estimate - estimate.mean())
        out[method] = {"r2": r2, "r2_centred": centred, "mobius": mobius, "evaluations": spent, "seconds": seconds}
    return out


def attribution_proxyspex_planted(args: argparse.Namespace) -> str:
    import torch

    from trustlit.attribution.fourier import mobius_game

    n = 40
    budgets = (250, 500) if args.quick else PLANTED_BUDGETS
    games = 1 if args.quick else args.planted_games
    n_holdout = 2000 if args.quick else 10_000
    rows: dict[tuple[str, int], list[dict]] = {}
    for g in range(games):
        truth = planted_mobius(n, seed=g)
        game = PlantedGame(n, truth)
        holdout = torch.randint(
            0, 2, (n_holdout, n), generator=torch.Generator().manual_seed(10_000 + g), dtype=torch.bool
        )
        truth_holdout = mobius_game(truth, holdout)
        for budget in budgets:
            for method, res in score_methods(game, budget, holdout, truth_holdout, METHODS).items():
                rows.setdefault((method, budget), []).append({**res, **recovery(truth, res["mobius"])})
    body = []
    for method in METHODS:
        for budget in budgets:
            cell = rows[(method, budget)]

            def mean(key: str, cell: list[dict] = cell) -> float:
                return statistics.fmean(r[key] for r in cell)

            body.append(
                [
                    method,
                    str(budget),
                    f"{mean('r2'):.3f}",
                    f"{min(r['r2'] for r in cell):.3f}",
                    f"{mean('precision'):.2f}",
                    f"{mean('recall'):.2f}",
                    " / ".join(f"{mean(f'recall{order}'):.2f}" for order in (1, 2, 3)),
                    f"{mean('error'):.3f}",
                    f"{mean('seconds'):.1f}",
                ]
            )
    mean_r2 = {key: statistics.fmean(r["r2"] for r in cell) for key, cell in rows.items()}
    gap = [f"{b}: {mean_r2[('ProxySPEX', b)] - mean_r2[('LASSO', b)]:+.3f}" for b in budgets]
    header = [
        "method",
        "budget",
        "R^2 (mean)",
        "R^2 (min)",
        "precision",
        "recall",
        "recall 1 / 2 / 3",
        "coef. error",
        "s",
    ]
    return "\n".join(
        [
            "## ProxySPEX: planted sparse hierarchical games",
            "",
            f"n = {n} players; {games} games, each with 10 main effects, 2 triples on 6 of those players and the"
            " triples' 6 pairs (hierarchical: every subset of a planted term is planted): 18 non-empty Möbius"
            " terms a_T = ±U(0.5, 2) x 2^(|T| - 1) (so that each"
            " term's top Fourier coefficient a_T / 2^|T| has the same spread; unscaled, pairs and triples hold under"
            " 5 % of the variance and the 95 % energy cut drops them), constant 1,"
            f" no noise. R^2 on {n_holdout} held-out uniform masks shared by all methods (not counted in the budget)."
            " ProxySPEX: the released LightGBM grid (depth {3, 5} x trees {500, 1000} x learning rate {0.01, 0.1},"
            " 5-fold CV), 95 % energy, ridge refit. LASSO: `lasso_attribution` (LassoCV over the constant and the n"
            " first-order Fourier terms, 5-fold CV). KernelSHAP: regression, kernel weights, with replacement, paired;"
            " LeverageSHAP: regression, leverage scores, without replacement, paired; both scored as the additive game"
            f" v(0) + sum_(i in S) phi_i. Support: non-empty terms with |a_T| > {THRESHOLD}; precision / recall against"
            " the 18 planted terms (recall also per order: 10 main effects / 6 pairs / 2 triples); coefficient error:"
            " sum_T (a_hat_T - a_T)^2 / sum_T a_T^2 over non-empty T. Seconds: mean wall time per fit, one thread.",
            "",
            table(header, body, "lrrrrrrrr"),
            "",
            f"ProxySPEX R^2 minus LASSO R^2 by budget: {', '.join(gap)} (target: at least +0.2 at equal budget).",
        ]
    )


# -- the SmolLM2 game -----------------------------------------------------------------------------


class DiskMemo:
    """A game memoised in a JSON file (mask bits -> value), so an interrupted benchmark resumes without the model."""

    def __init__(self, path: Path, n_players: int, make_value) -> None:
        self.path, self.n_players, self.make_value, self.value = path, n_players, make_value, None
        self.cache: dict[str, float] = json.loads(path.read_text()) if path.is_file() else {}
        self.computed, self.seconds = 0, 0.0  # evaluations this process ran, and their wall time

    def __call__(self, masks):
        import torch

        from trustlit.paths import write_json_atomic

        keys = ["".join("1" if b else "0" for b in row) for row in masks.tolist()]
        missing = sorted({k for k in keys if k not in self.cache})
        for start in range(0, len(missing), 256):
            chunk = missing[start : start + 256]
            if self.value is None:
                self.value = self.make_value()
            batch = torch.tensor([[c == "1" for c in k] for k in chunk])
            start = time.perf_counter()
            self.cache.update(zip(chunk, self.value(batch).tolist(), strict=True))
            self.computed, self.seconds = self.computed + len(chunk), self.seconds + time.perf_counter() - start
            write_json_atomic(self.path, self.cache)
        return torch.tensor([self.cache[k] for k in keys], dtype=torch.float64)


def tofu_records(count: int) -> list[dict[str, str]]:
    """TOFU forget10 records whose answer (the passage) has 30-60 words, one per author, in file order."""
    path = TOFU / "forget10.json"
    out, authors = [], set()
    for i, line in enumerate(path.open(encoding="utf-8")):
        record = json.loads(line)
        if 30 <= len(record["answer"].split()) <= 60 and i // 20 not in authors:
            authors.add(i // 20)
            out.append({"question": record["question"], "passage": record["answer"]})
        if len(out) == count:
            break
    return out


def attribution_proxyspex_smollm2(args: argparse.Namespace) -> str:
    import torch

    from trustlit.attribution.explain import TokenInteractions
    from trustlit.llm.loading import CausalLMSpec
    from trustlit.paths import write_json_atomic

    # one cache for quick and full runs: it holds game values by mask, and a quick run's masks are the first ones of a
    # full run's (nested training draws, nested with-replacement KernelSHAP draws, held-out masks a prefix)
    root = Path(args.workdir) / "proxyspex"
    budgets = (250, 500) if args.quick else LLM_BUDGETS
    count, n_holdout = (1, 300) if args.quick else (args.llm_contexts, args.llm_holdout)
    loaded: list[TokenInteractions] = []

    def game_of(record: dict[str, str]):
        """The project's TokenInteractions game (passage words as players, the question and chat template fixed)."""
        if not loaded:
            spec = CausalLMSpec("smollm2-135m-instruct")
            loaded.append(TokenInteractions(spec, context="passage", target="greedy", target_tokens=TARGET_TOKENS))
        return loaded[0].game(record["question"], record["passage"])

    rows, notes, speed = [], [], [0, 0.0]
    for c, record in enumerate(tofu_records(count)):
        meta_path = root / f"context{c}_meta.json"
        if not meta_path.is_file():
            game = game_of(record)
            target = loaded[0].tokenizer.decode(game.target_ids)
            write_json_atomic(meta_path, {**record, "target": target, "words": game.player_texts})
        meta = json.loads(meta_path.read_text())
        n = len(meta["words"])
        game = DiskMemo(root / f"context{c}_values.json", n, lambda record=record: game_of(record))
        generator = torch.Generator().manual_seed(10_000 + c)
        holdout = torch.randint(0, 2, (n_holdout, n), generator=generator, dtype=torch.bool)
        truth_holdout = game(holdout)
        for budget in budgets:
            for method, res in score_methods(game, budget, holdout, truth_holdout, LLM_METHODS).items():
                rows.append({"context": c, "budget": budget, "method": method, **res})
        speed = [speed[0] + game.computed, speed[1] + game.seconds]
        spex = [r for r in rows if r["context"] == c and r["method"] == "ProxySPEX"][-1]["mobius"]
        top = sorted((t for t in spex if len(t) >= 2), key=lambda t: -abs(spex[t]))[:3]
        shown = ", ".join(f"{{{' '.join(meta['words'][i] for i in sorted(t))}}} {spex[t]:+.2f}" for t in top)
        notes.append(
            f"- Context {c} (n = {n} words, {len(game.cache)} distinct evaluations cached): question"
            f' "{meta["question"]}"; explained answer "{meta["target"].strip()}". Largest ProxySPEX'
            f" interactions (Möbius, log-probability) at budget {budgets[-1]}: {shown or 'none'}."
        )
    header = ["context", "budget", *LLM_METHODS, "KernelSHAP (additive, mean offset removed)", "ProxySPEX - LASSO"]
    body = []
    for c in sorted({r["context"] for r in rows}):
        for budget in budgets:
            cell = {r["method"]: r for r in rows if r["context"] == c and r["budget"] == budget}
            r2 = [f"{cell[m]['r2']:.3f}" for m in LLM_METHODS]
            gap = cell["ProxySPEX"]["r2"] - cell["LASSO"]["r2"]
            body.append([str(c), str(budget), *r2, f"{cell[LLM_METHODS[2]]['r2_centred']:.3f}", f"{gap:+.3f}"])
    return "\n".join(
        [
            "## ProxySPEX: SmolLM2-135M-Instruct on TOFU passages",
            "",
            "Game: the project's `TokenInteractions` game (`context=passage`, `target=greedy`): the players are the"
            " whitespace-separated words of a TOFU forget10 answer (30-60 words; one record per fictitious author),"
            " placed in the chat template as the passage with its question after it (template and question fixed);"
            f" v(S) = log p(y | template(words in S)), y the model's own first {TARGET_TOKENS} greedy tokens for the"
            " full prompt; absent words removed (`TokenValue`, mode `remove`). Methods and settings as in the planted"
            " section, without LeverageSHAP (its without-replacement draws are not nested across budgets: one more"
            f" full set of LLM calls per budget). R^2 on {n_holdout} held-out uniform masks per context, shared by"
            " all methods (the paper and SPEX's code use 10,000; fewer here for CPU time: "
            + (
                f"{speed[1] / speed[0]:.2f} s per evaluation in this run, on this shared CPU, one thread)."
                if speed[0]
                else "every value came from the cache of an earlier run)."
            ),
            "",
            table(header, body, "rr" + "r" * (len(LLM_METHODS) + 2)),
            "",
            *notes,
            "",
            "Target: ProxySPEX R^2 at least 0.2 above LASSO's at equal budget. KernelSHAP's additive game"
            " v(0) + sum_(i in S) phi_i is exact at the empty and full coalitions but, where words only matter"
            " together, far off on average at the half-size coalitions that uniform masks draw: its R^2 is"
            " negative; with that mean offset removed it is close to LASSO's (the additive fit that uniform"
            " masks reward is the Banzhaf-like one LASSO finds, not the Shapley one).",
        ]
    )


SECTIONS = {
    "attribution-proxyspex-planted": attribution_proxyspex_planted,
    "attribution-proxyspex-smollm2": attribution_proxyspex_smollm2,
}
