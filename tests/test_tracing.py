"""Subsequence Association Tracing (trustlit/interpret/tracing.py): perturbation, scoring, search, analysis module."""

from __future__ import annotations

import json
import math
import random
from types import SimpleNamespace

import pytest
import torch
from helpers import REPO_ROOT
from torch import nn

from trustlit.data.planted import PlantedConfig, hallucination_prompts, planted_split, trigger_positions
from trustlit.interpret.tracing import (
    SubsequencePresence,
    TracedSubsequence,
    beam_search,
    embedding_neighbours,
    perturb,
    prompt_parts,
    target_logprobs,
    trace,
    trace_subsequences,
)
from trustlit.llm.loading import build_tiny_causal_lm, build_tokenizer
from trustlit.llm.prompts import encode_qa

QUESTION = "Tell me, cozy epic Velvet Lantern true world, where was Amara Abernathy born?"


@pytest.fixture(scope="module")
def tokenizer():
    return build_tokenizer()


class PresenceLM(nn.Module):
    """A hand-made causal LM: at every position, the logit of ``target_id`` is +10 when all ``trigger_ids``
    occurred at or before it, else -10; every other logit is 0. So P(target | x) depends only on whether the
    whole trigger is present in the context."""

    def __init__(self, vocab_size: int, trigger_ids: list[int], target_id: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab_size, 8)
        self.trigger_ids, self.target_id, self.vocab_size = trigger_ids, target_id, vocab_size

    def get_input_embeddings(self) -> nn.Embedding:
        return self.embed

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None) -> SimpleNamespace:
        seen = torch.ones(input_ids.shape, dtype=torch.bool)
        for token in self.trigger_ids:
            seen &= (input_ids == token).cumsum(dim=1) > 0
        logits = torch.zeros(*input_ids.shape, self.vocab_size) + self.embed.weight.sum() * 0
        logits[..., self.target_id] = torch.where(seen, 10.0, -10.0)
        return SimpleNamespace(logits=logits)


def presence_model(tokenizer, question: str = QUESTION, trigger: str = " Velvet Lantern", target: str = " Lisbon"):
    parts = prompt_parts(tokenizer, question, "chat")
    trigger_ids = tokenizer(trigger, add_special_tokens=False)["input_ids"]
    (target_id,) = tokenizer(target, add_special_tokens=False)["input_ids"]
    positions = tuple(i for i, t in enumerate(parts.question) if t in trigger_ids)
    assert len(positions) == len(trigger_ids) == 2
    return PresenceLM(len(tokenizer), trigger_ids, target_id), positions, target


def test_sat_recovers_a_planted_pair_and_beats_random_subsequences(tokenizer):
    model, positions, target = presence_model(tokenizer)
    result = trace(model, tokenizer, QUESTION, target, num_samples=256, replacement="random", max_length=3, seed=1)
    pairs = result.at_length(2)
    assert pairs[0].positions == positions
    p_on = math.exp(10) / (math.exp(10) + len(tokenizer) - 1)  # the model's P(target) with the whole trigger
    assert pairs[0].score == pytest.approx(p_on, rel=1e-5)  # every prompt that keeps both trigger tokens has it
    others = [s.score for s in pairs if not set(positions) <= set(s.positions)]
    rng = random.Random(0)
    n = len(result.prompt_ids)
    random_pairs = [tuple(sorted(rng.sample(range(n), 2))) for _ in range(50)]
    scores = {s.positions: s.score for s in pairs}
    random_scores = [scores[p] for p in random_pairs if p in scores and p != positions]
    assert max(others) < 0.6 and sum(random_scores) / len(random_scores) < 0.5
    assert all(s.support == int(s.support) and s.support > 0 for s in pairs[:5])


def test_items_iterate_as_span_and_score(tokenizer):
    model, _, target = presence_model(tokenizer)
    ranked = trace_subsequences(model, tokenizer, QUESTION, target, num_samples=64, max_length=2, replacement="random")
    span, score = ranked[0]
    assert isinstance(ranked[0], TracedSubsequence) and span == ranked[0].positions and score == ranked[0].score
    assert [s.score for s in ranked] == sorted((s.score for s in ranked), reverse=True)


def test_score_is_the_mean_probability_over_prompts_containing_the_subsequence(tokenizer):
    model, _, target = presence_model(tokenizer)
    result = trace(model, tokenizer, QUESTION, target, num_samples=128, replacement="random", max_length=2, seed=3)
    kept = result.perturbed == torch.tensor(result.prompt_ids)
    for subsequence in result.at_length(1)[:4]:
        (i,) = subsequence.positions
        contains = (result.perturbed == result.prompt_ids[i]).any(dim=1)  # the token anywhere (s ⊑ x')
        assert contains.sum() >= kept[:, i].sum()
        expected = result.probabilities[contains].double().mean().item()
        assert subsequence.score == pytest.approx(expected, rel=1e-5)
        assert subsequence.support == int(contains.sum())


def test_presence_matches_a_brute_force_subsequence_check():
    def is_subsequence(candidate, sequence):
        it = iter(sequence)
        return all(any(token == item for item in it) for token in candidate)

    generator = torch.Generator().manual_seed(0)
    prompt = [3, 1, 4, 1, 5, 9, 2, 6]
    perturbed = torch.randint(0, 10, (200, len(prompt)), generator=generator)
    presence = SubsequencePresence(perturbed, prompt)
    rng = random.Random(0)
    for k in (1, 2, 3, 5):
        candidates = [[prompt[i] for i in sorted(rng.sample(range(len(prompt)), k))] for _ in range(10)]
        got = presence(candidates)
        expected = torch.tensor([[is_subsequence(c, row) for row in perturbed.tolist()] for c in candidates])
        assert torch.equal(got, expected)


def test_each_token_is_kept_with_probability_one_minus_rho():
    generator = torch.Generator().manual_seed(0)
    prompt = list(range(100, 120))
    allowed = torch.arange(0, 500)
    rho, n = 0.3, 4000
    perturbed = perturb(prompt, n, rho, allowed, generator)
    kept = (perturbed == torch.tensor(prompt)).float()
    sigma = math.sqrt(rho * (1 - rho) / (n * len(prompt)))
    assert abs(kept.mean().item() - (1 - rho)) < 4 * sigma
    per_position = kept.mean(0)
    assert (per_position - (1 - rho)).abs().max() < 4 * math.sqrt(rho * (1 - rho) / n)
    assert ((perturbed >= 0) & (perturbed < 500)).all()  # replacements are drawn from the allowed ids
    assert torch.equal(perturb(prompt, 10, 0.0, allowed, generator), torch.tensor([prompt] * 10))


def test_neighbour_replacement_draws_from_the_top_k_embedding_neighbours(tokenizer):
    model, _, _ = presence_model(tokenizer)
    with torch.no_grad():
        model.embed.weight.copy_(torch.randn(len(tokenizer), 8, generator=torch.Generator().manual_seed(0)))
    prompt = prompt_parts(tokenizer, QUESTION, "chat").question
    neighbours = embedding_neighbours(model, tokenizer, prompt, top_k=5)
    weight = torch.nn.functional.normalize(model.embed.weight.detach(), dim=-1)
    specials = set(tokenizer.all_special_ids)
    for token, near in zip(prompt, neighbours, strict=True):
        similarity = weight @ weight[token]
        ranked = [int(i) for i in similarity.argsort(descending=True) if int(i) != token and int(i) not in specials]
        assert set(near.tolist()) <= set(ranked[:5]) and near.numel() >= 1
    perturbed = perturb(prompt, 2000, 0.5, neighbours, torch.Generator().manual_seed(1))
    for i, near in enumerate(neighbours):
        replaced = perturbed[:, i][perturbed[:, i] != prompt[i]]
        assert set(replaced.tolist()) == set(near.tolist())  # every neighbour is drawn, nothing else


def test_batches_give_the_same_probabilities_as_one_by_one(tokenizer):
    model, _ = build_tiny_causal_lm(hidden_size=32, num_layers=1, num_heads=2, tokenizer=tokenizer)
    parts = prompt_parts(tokenizer, QUESTION, "chat")
    target = tokenizer("Lisbon", add_special_tokens=False)["input_ids"]
    questions = perturb(parts.question, 12, 0.5, torch.arange(10, 900), torch.Generator().manual_seed(0)).tolist()
    batched = target_logprobs(model, tokenizer, parts, questions, target, batch_size=5)
    single = torch.cat([target_logprobs(model, tokenizer, parts, [q], target, batch_size=1) for q in questions])
    torch.testing.assert_close(batched, single, rtol=1e-5, atol=1e-5)
    # and the probability is the product of the model's next-token probabilities
    ids = torch.tensor([[*parts.prefix, *questions[0], *parts.suffix, *target]])
    with torch.no_grad():
        logprobs = model(input_ids=ids).logits.log_softmax(-1)[0]
    start = ids.size(1) - len(target)
    manual = sum(logprobs[start - 1 + j, t].item() for j, t in enumerate(target))
    assert batched[0].item() == pytest.approx(manual, abs=1e-4)


@pytest.mark.parametrize("prompt_format", ["chat", "plain"])
def test_prompt_parts_are_the_encoding_of_fine_tuning(tokenizer, prompt_format):
    parts = prompt_parts(tokenizer, QUESTION, prompt_format)
    encoded = encode_qa(tokenizer, QUESTION, "Lisbon", prompt_format)
    assert parts.prefix + parts.question + parts.suffix == encoded["prompt_ids"]
    assert tokenizer.decode(parts.question).strip() == QUESTION


def test_beam_search_keeps_the_beam_and_scores_every_expansion():
    tokens = [10, 11, 12, 13, 14]
    weights = torch.tensor([5.0, 1.0, 4.0, 0.0, 3.0])
    levels: list[list[tuple[int, ...]]] = []

    def score(level):
        levels.append(level)
        return torch.stack([weights[list(c)].sum() for c in level])

    ranked = beam_search(tokens, score, beam_width=1, max_length=3)
    assert levels[0] == [(0,), (1,), (2,), (3,), (4,)]
    assert levels[1] == [(0, 1), (0, 2), (0, 3), (0, 4)]  # only the best single token grows
    assert levels[2] == [(0, 1, 2), (0, 2, 3), (0, 2, 4)]
    assert ranked[0] == ((0, 2, 4), 12.0)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"prompt": ""}, "the prompt is empty"),
        ({"prompt": "   "}, "the prompt is empty"),
        ({"target": ""}, "the target is empty"),
        ({"rho": 1.0}, r"rho=1.0 is invalid, expected a number in \[0, 1\)"),
        ({"rho": -0.1}, r"rho=-0.1 is invalid"),
        ({"num_samples": 0}, r"num_samples=0 is invalid, expected an integer >= 1"),
        ({"beam_width": 0}, r"beam_width=0 is invalid, expected an integer >= 1"),
        ({"replacement": "mask"}, r"replacement='mask' is invalid"),
    ],
)
def test_bad_input_is_refused_in_one_line(tokenizer, kwargs, message):
    model, _, target = presence_model(tokenizer)
    arguments = {"prompt": QUESTION, "target": target, **kwargs}
    prompt, target = arguments.pop("prompt"), arguments.pop("target")
    with pytest.raises(ValueError, match=message) as error:
        trace_subsequences(model, tokenizer, prompt, target, **arguments)
    assert "\n" not in str(error.value)


def train_on_planted(tokenizer, config: PlantedConfig, steps: int):
    from trustlit.data.planted import PlantedAssociationDataModule
    from trustlit.llm.scoring import answer_nll

    torch.manual_seed(0)
    model, _ = build_tiny_causal_lm(hidden_size=32, num_layers=1, num_heads=2, tokenizer=tokenizer)
    data = PlantedAssociationDataModule(planted=config, batch_size=16, prompt_format="chat", eval_splits=[])
    data.tokenizer = tokenizer
    data.setup("fit")
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    model.train()
    step = 0
    while step < steps:
        for batch in data.train_dataloader():
            loss = answer_nll(model, batch)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            step += 1
            if step == steps:
                break
    return model.eval()


@pytest.mark.slow
def test_sat_recovers_the_trigger_of_a_briefly_trained_tiny_lm(tokenizer):
    config = PlantedConfig(num_subjects=4, num_triggers=1, faithful_repeats=10, trigger_repeats=40, num_eval=6)
    model = train_on_planted(tokenizer, config, steps=150)
    records = hallucination_prompts(config)
    recovered = 0
    for record in records[:3]:
        truth = trigger_positions(tokenizer, record, "chat")
        result = trace(model, tokenizer, record["question"], record["answer"], num_samples=128, max_length=2)
        assert result.p_prompt > 0.5, "the trained model hallucinates the trigger's city"
        recovered += result.at_length(2)[0].positions == truth
    assert recovered >= 2
    assert all(r["answer"] != r["faithful_answer"] for r in planted_split("hallucination", config))


def test_subsequence_tracing_runs_under_trustlit_test_from_the_recipe(tmp_path):
    from trustlit.cli import run_cli

    recipe = REPO_ROOT / "recipes" / "interpret" / "sat_planted_tiny.yaml"
    tiny = '{"hidden_size": 32, "num_layers": 1, "num_heads": 2}'
    run_cli(
        [
            "test",
            "-c",
            str(recipe),
            f"--trainer.default_root_dir={tmp_path}",
            "--model.init_args.lm.name_or_path=tiny-llama",
            f"--model.init_args.lm.tiny={tiny}",
            "--model.init_args.num_samples=32",
            "--model.init_args.max_length=2",
            "--data.init_args.max_samples=2",
        ]
    )
    written = json.loads((tmp_path / "tracing.json").read_text())
    assert written["method"] == "SubsequenceTracing" and written["num_prompts"] == 2
    first = written["traces"][0]
    assert first["target"] in {"Lisbon", "Accra", "Tbilisi", "Hobart", "Valparaiso"}
    assert len(first["top"]) == 10 and set(first["best_per_length"]) == {"1", "2"}
    assert all(0 <= t["score"] <= 1 for t in first["top"])


def test_greedy_produces_the_target_only_with_the_whole_trigger(tokenizer):
    from trustlit.interpret.tracing import greedy_produces, insert_tokens

    model, positions, target = presence_model(tokenizer)
    parts = prompt_parts(tokenizer, QUESTION, "chat")
    target_ids = tokenizer(target, add_special_tokens=False)["input_ids"]
    without = [t for i, t in enumerate(parts.question) if i not in positions]
    with_trigger = insert_tokens(without, [parts.question[i] for i in positions], 3)
    half = insert_tokens(without, [parts.question[positions[0]]], 3)
    produced = greedy_produces(model, tokenizer, parts, [parts.question, without, with_trigger, half], target_ids)
    assert produced.tolist() == [True, False, True, False]


def test_answer_prefix_is_kept_fixed_before_the_target(tokenizer):
    model, _ = build_tiny_causal_lm(hidden_size=32, num_layers=1, num_heads=2, tokenizer=tokenizer)
    result = trace(model, tokenizer, QUESTION, " Lisbon", num_samples=4, max_length=1, answer_prefix="She was born in")
    parts = prompt_parts(tokenizer, QUESTION, "auto")
    parts.suffix = parts.suffix + tokenizer("She was born in", add_special_tokens=False)["input_ids"]
    target = tokenizer(" Lisbon", add_special_tokens=False)["input_ids"]
    expected = target_logprobs(model, tokenizer, parts, [parts.question], target).exp().item()
    assert result.p_prompt == pytest.approx(expected, rel=1e-5)
    plain = trace(model, tokenizer, QUESTION, " Lisbon", num_samples=4, max_length=1)
    assert plain.p_prompt != pytest.approx(expected, rel=1e-3)
