"""Attention-Shifting: its pure functions against hand-computed values, then the module (both modes)
on a tiny Llama fine-tuned on the fictitious corpus."""

from __future__ import annotations

import math

import lightning as L
import pytest
import torch
from helpers import quiet_trainer
from torch.utils.data import DataLoader

from trustlit import CausalLMFineTuning, CausalLMSpec
from trustlit.data import FictitiousConfig, ForgetRetainDataModule, QADataModule
from trustlit.llm.loading import build_tokenizer
from trustlit.llm.prompts import IGNORE_INDEX, collate_qa, encode_qa
from trustlit.llm.scoring import sequence_logprobs
from trustlit.unlearning.attention_shifting import (
    ADAPTER_NAME,
    AttentionShifting,
    answer_query_mask,
    attention_kl,
    attention_mass,
    attention_received,
    importance_scores,
    released_suppression_target,
    shift_weights,
    shifted_attention,
    softmax_kl,
    token_char_spans,
    token_tags,
    top_fraction_mask,
    universal_tags,
)
from trustlit.unlearning.losses import token_mean_nll

TINY = {"hidden_size": 32, "num_layers": 2, "num_heads": 2}
CORPUS = FictitiousConfig(num_authors=10)


pytestmark = pytest.mark.usefixtures("one_thread")


def forget_retain_data(module: L.LightningModule, refusals: str | None = "default") -> ForgetRetainDataModule:
    data = ForgetRetainDataModule(
        source="fictitious",
        forget_split="forget10",
        retain_split="retain90",
        fictitious=CORPUS,
        batch_size=4,
        max_length=64,
        prompt_format="chat",
        refusals=refusals,
    )
    data.tokenizer = module.tokenizer
    data.setup("fit")
    return data


# -- pure functions -------------------------------------------------------------------------------


def test_answer_query_mask_marks_positions_that_predict_answer_tokens():
    labels = torch.tensor([[IGNORE_INDEX, IGNORE_INDEX, 5, 6, IGNORE_INDEX]])
    assert answer_query_mask(labels).tolist() == [[False, True, True, False, False]]


def test_attention_received_averages_heads_and_answer_rows():
    head0 = torch.tensor([[1.0, 0.0, 0.0], [0.5, 0.5, 0.0], [0.2, 0.3, 0.5]])
    head1 = torch.tensor([[1.0, 0.0, 0.0], [0.1, 0.9, 0.0], [0.4, 0.4, 0.2]])
    attention = torch.stack([head0, head1])[None]  # [1, 2, 3, 3]
    received = attention_received(attention, torch.tensor([[False, True, True]]))
    # rows 1 and 2 of both heads: ([0.5,0.5,0] + [0.2,0.3,0.5] + [0.1,0.9,0] + [0.4,0.4,0.2]) / 4
    torch.testing.assert_close(received, torch.tensor([[0.3, 0.525, 0.175]]))


def test_importance_scores_weigh_saliency_by_attention_and_normalise_over_candidates():
    gradient_norm = torch.tensor([[1.0, 2.0, 3.0, 4.0], [0.0, 0.0, 0.0, 0.0]])
    attention = torch.tensor([[0.5, 0.25, 0.25, 0.0], [0.4, 0.3, 0.2, 0.1]])
    candidates = torch.tensor([[False, True, True, True], [True, True, False, False]])
    scores = importance_scores(gradient_norm, attention, candidates)
    # sample 0: a*g on candidates = [-, 0.5, 0.75, 0] -> / 1.25; sample 1 scores 0 everywhere: uniform
    torch.testing.assert_close(scores, torch.tensor([[0.0, 0.4, 0.6, 0.0], [0.5, 0.5, 0.0, 0.0]]))


def test_top_fraction_mask_selects_the_top_candidates():
    scores = torch.tensor([[0.1, 0.4, 0.3, 0.2], [0.1, 0.4, 0.3, 0.2]])
    candidates = torch.tensor([[True, True, True, True], [True, False, True, True]])
    # sample 0: ceil(0.5 * 4) = 2 -> keys 1, 2; sample 1: key 1 is no candidate, ceil(0.5 * 3) = 2 -> keys 2, 3
    assert top_fraction_mask(scores, candidates, 0.5).tolist() == [
        [False, True, True, False],
        [False, False, True, True],
    ]
    ten = torch.arange(10.0)[None]
    assert top_fraction_mask(ten, torch.ones(1, 10, dtype=torch.bool), 0.3).sum() == 3  # not ceil(3.0000000000000004)
    assert top_fraction_mask(ten, torch.ones(1, 10, dtype=torch.bool), 0.01).tolist() == [[False] * 9 + [True]]
    ties = top_fraction_mask(torch.zeros(1, 4), torch.ones(1, 4, dtype=torch.bool), 0.5)
    assert ties.tolist() == [[True, True, False, False]]
    assert not top_fraction_mask(scores[:1], torch.zeros(1, 4, dtype=torch.bool), 0.5).any()


def test_shift_weights_and_shifted_attention_move_mass_off_the_selected_keys():
    weights = shift_weights(torch.tensor([[False, True]]), 1 - 0.3, 1 + 1.2)
    torch.testing.assert_close(weights, torch.tensor([[2.2, 0.7]]))
    shifted = shifted_attention(torch.tensor([[[[0.6, 0.4]]]]), weights)
    # [0.6 * 2.2, 0.4 * 0.7] = [1.32, 0.28], / 1.6
    torch.testing.assert_close(shifted, torch.tensor([[[[0.825, 0.175]]]]))

    reference = torch.tensor([[[[0.5, 0.3, 0.2, 0.0], [0.0, 0.0, 0.0, 0.0]]]])  # a future key; an empty row
    shifted = shifted_attention(reference, torch.tensor([[1.0, 0.5, 2.0, 3.0]]))
    torch.testing.assert_close(shifted[0, 0, 0], torch.tensor([0.5, 0.15, 0.4, 0.0]) / 1.05)
    assert shifted[0, 0, 1].eq(0).all(), "a row without mass stays empty"
    assert shifted[0, 0, 0, 0] / shifted[0, 0, 0, 2] == pytest.approx(0.5 / 0.4), "relative structure is kept"


def test_suppression_and_retention_losses_at_the_start_of_training():
    reference = torch.tensor([[[[1.0, 0.0], [0.6, 0.4]]]])  # one sample, one head, two query rows
    queries = torch.tensor([[False, True]])
    fact = torch.tensor([[False, True]])
    suppression = attention_kl(shifted_attention(reference, shift_weights(fact, 0.7, 2.2)), reference, queries)
    # target row [0.825, 0.175] against the unchanged attention [0.6, 0.4]
    expected = 0.825 * math.log(0.825 / 0.6) + 0.175 * math.log(0.175 / 0.4)
    assert suppression.item() == pytest.approx(expected, abs=1e-6)
    essential = torch.tensor([[True, False]])
    retention = attention_kl(shifted_attention(reference, shift_weights(essential, 1.2, 1.0)), reference, queries)
    # target row [0.72, 0.4] / 1.12
    expected = 0.72 / 1.12 * math.log(0.72 / 1.12 / 0.6) + 0.4 / 1.12 * math.log(0.4 / 1.12 / 0.4)
    assert retention.item() == pytest.approx(expected, abs=1e-6)


def test_attention_kl_sums_heads_and_answer_rows_and_averages_samples():
    target = torch.tensor([[0.5, 0.5, 0.0], [1.0, 0.0, 0.0]])
    current = torch.tensor([[0.25, 0.75, 0.0], [0.5, 0.5, 0.0]])
    both = torch.stack([target, target])[:, None], torch.stack([current, current])[:, None]  # [2, 1, 2, 3]
    mask = torch.tensor([[False, True], [False, False]])
    assert attention_kl(*both, mask).item() == pytest.approx(math.log(2.0) / 2, abs=1e-6)  # KL([1,0,0]||[.5,.5,0])
    mask = torch.tensor([[True, False], [True, True]])
    row0 = 0.5 * math.log(2.0) + 0.5 * math.log(2.0 / 3.0)
    expected = (row0 + (row0 + math.log(2.0))) / 2
    assert attention_kl(*both, mask).item() == pytest.approx(expected, abs=1e-6)
    assert attention_kl(both[1], both[1], mask).item() == pytest.approx(0.0, abs=1e-6)


def test_attention_mass_averages_the_mass_on_masked_keys_over_answer_rows():
    attention = torch.tensor([[[[1.0, 0.0, 0.0], [0.6, 0.4, 0.0], [0.2, 0.3, 0.5]]]])
    mass = attention_mass(attention, torch.tensor([[False, True, True]]), torch.tensor([[False, True, True]]))
    assert mass.item() == pytest.approx((0.4 + 0.8) / 2)


# -- paper mode: part-of-speech masks and the released losses ----------------------------------------


def test_universal_tags_map_penn_tags_and_tell_auxiliaries_from_verbs():
    tagged = [("Jaime", "NNP"), ("was", "VBD"), ("born", "VBN"), ("in", "IN"), ("1958", "CD"), (",", ",")]
    assert universal_tags(tagged) == ["PROPN", "AUX", "VERB", "ADP", "NUM", "PUNCT"]
    # have/do: auxiliary before a verb (also past "not" and a pronoun), a verb otherwise
    assert universal_tags([("He", "PRP"), ("has", "VBZ"), ("not", "RB"), ("written", "VBN")])[1] == "AUX"
    assert universal_tags([("Did", "VBD"), ("he", "PRP"), ("write", "VB")])[0] == "AUX"
    assert universal_tags([("He", "PRP"), ("has", "VBZ"), ("a", "DT"), ("son", "NN")])[1] == "VERB"
    assert universal_tags([("xx", "ZZZ")]) == ["X"]


def test_token_tags_give_each_token_the_last_word_it_overlaps():
    # text "Jaime's   son": words Jaime [0,5) PROPN, 's [5,7) PART, son [10,13) NOUN
    words = [(5, 7, "PART"), (0, 5, "PROPN"), (10, 13, "NOUN")]
    spans = [(0, 3), (3, 6), (6, 7), (7, 10), (9, 13), (13, 13)]
    # "Jai" -> Jaime; "me'" overlaps Jaime and 's: the last; "s" -> 's; "   " -> none; " son"; an empty span
    assert token_tags(spans, words) == ["PROPN", "PART", "PART", None, "NOUN", None]


def test_token_char_spans_cover_the_decoded_text():
    tokenizer = build_tokenizer()
    ids = tokenizer("Evelyn Desmet was born in Brussels", add_special_tokens=False)["input_ids"]
    text, spans = token_char_spans(tokenizer, ids)
    assert text == "Evelyn Desmet was born in Brussels"
    assert [text[a:b] for a, b in spans] == [tokenizer.decode([i]) for i in ids]


def test_paper_mask_selects_exactly_the_proper_nouns_verbs_and_numbers():
    module = AttentionShifting(lm=CausalLMSpec(tiny=TINY), layers=[-1])
    question, answer = "Where was Jaime Vasquez born?", "Jaime Vasquez was born in Santiago in 1958."
    samples = [
        {**encode_qa(module.tokenizer, q, a, "chat", 64), "index": i, "question": q, "answer": a}
        for i, (q, a) in enumerate([(question, answer), ("Who is she?", "She is a writer.")])
    ]
    batch = collate_qa(samples, module.tokenizer.pad_token_id)
    fact, other = module.part_of_speech_masks(batch)
    assert not (fact & other).any()

    def runs(row: int, mask: torch.Tensor) -> list[str]:
        """The decoded runs of consecutive masked tokens."""
        pieces = [
            module.tokenizer.decode([t]) if m else "|" for t, m in zip(batch["input_ids"][row], mask[row], strict=True)
        ]
        return [run for run in "".join(pieces).split("|") if run]

    # PROPN, VERB and NUM words (not the auxiliary "was"), in the question and in the answer
    assert runs(0, fact) == [" Jaime Vasquez born", "Jaime Vasquez", " born", " Santiago", " 1958"]
    assert runs(0, other) == ["Where was", "?", " was", " in", " in", "."]
    # template (role names), special and padding tokens are in neither mask
    tagged = [module.tokenizer.decode([t]) for t, m in zip(batch["input_ids"][0], fact[0] | other[0], strict=True) if m]
    assert "".join(tagged) == question + answer
    assert runs(1, fact) == [] and "".join(runs(1, other)).replace(" ", "") == "Whoisshe?Sheisawriter."
    assert module._tag_cache.keys() == {("None", 0), ("None", 1)}  # tagged once per sample


def test_released_suppression_target_scales_fact_rows_and_flattens_the_other_rows():
    reference = torch.tensor([[1.0, 0.0, 0.0], [0.6, 0.4, 0.0], [0.2, 0.3, 0.5]])[None, None]  # [1, 1, 3, 3]
    fact = torch.tensor([[False, True, False]])
    other = torch.tensor([[False, False, True]])
    valid = torch.ones(1, 3, dtype=torch.bool)
    target = released_suppression_target(reference, fact, other, valid, sigma=0.5, beta=0.1)[0, 0]
    # row 0 (untagged): clip to [1e-6, 1] then renormalise; row 1 (fact): [0.3, 0.2, 1e-6] / (0.5 + 1e-6 + 1e-6);
    # row 2 (other): [0.3, 0.4, 0.6] / (1.3 + 1e-6)
    torch.testing.assert_close(target[0], torch.tensor([1.0, 1e-6, 1e-6]) / (1.0 + 3e-6))
    torch.testing.assert_close(target[1], torch.tensor([0.3, 0.2, 1e-6]) / (0.5 + 2e-6))
    torch.testing.assert_close(target[2], torch.tensor([0.3, 0.4, 0.6]) / (1.3 + 1e-6))
    # the released beta = 1.2 lifts every other-row entry past the clip at 1: uniform rows; padding keys get 0
    valid = torch.tensor([[True, True, False]])
    target = released_suppression_target(reference, fact, other, valid, sigma=0.3, beta=1.2)[0, 0]
    torch.testing.assert_close(target[2], torch.tensor([1.0, 1.0, 0.0]) / (2.0 + 1e-6))


def test_softmax_kl_is_the_released_batchmean_of_softmaxed_attention():
    # B=1, H=2, T=3 hand-written maps; the KL runs over softmaxes of the probabilities
    p = torch.tensor(
        [[[1.0, 0.0, 0.0], [0.5, 0.5, 0.0], [0.2, 0.3, 0.5]], [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]]]
    )
    q = torch.tensor(
        [[[1.0, 0.0, 0.0], [1.0, 0.0, 0.0], [0.2, 0.3, 0.5]], [[1.0, 0.0, 0.0], [1.0, 0.0, 0.0], [0.0, 0.0, 1.0]]]
    )
    valid = torch.ones(1, 3, dtype=torch.bool)

    def kl(a: list[float], b: list[float]) -> float:  # KL(softmax(a) || softmax(b))
        za, zb = sum(math.exp(x) for x in a), sum(math.exp(x) for x in b)
        return sum(math.exp(x) / za * (x - math.log(za) - y + math.log(zb)) for x, y in zip(a, b, strict=True))

    # rows along keys: only the second row of each head differs
    expected = kl([0.5, 0.5, 0.0], [1.0, 0.0, 0.0]) + kl([0.0, 1.0, 0.0], [1.0, 0.0, 0.0])
    assert softmax_kl(p[None], q[None], valid, dim=-1).item() == pytest.approx(expected, rel=1e-5)
    # columns along queries (the retention term's second half): the first two columns of each head differ
    columns = [(p[h, :, k].tolist(), q[h, :, k].tolist()) for h in range(2) for k in range(3)]
    expected = sum(kl(a, b) for a, b in columns)
    assert softmax_kl(p[None], q[None], valid, dim=-2).item() == pytest.approx(expected, rel=1e-5)
    # direction: KL(softmax(source) || softmax(target)), not symmetric; batchmean divides by B
    assert softmax_kl(q[None], p[None], valid, dim=-1).item() == pytest.approx(
        kl([1.0, 0.0, 0.0], [0.5, 0.5, 0.0]) + kl([1.0, 0.0, 0.0], [0.0, 1.0, 0.0]), rel=1e-5
    )
    two = softmax_kl(torch.stack([p, p]), torch.stack([q, p]), torch.ones(2, 3, dtype=torch.bool), dim=-1)
    assert two.item() == pytest.approx(softmax_kl(p[None], q[None], valid, dim=-1).item() / 2, rel=1e-5)
    # a padding position leaves both the softmax and the sum: keys 0..1 and rows 0..1 only
    valid = torch.tensor([[True, True, False]])
    expected = kl([0.5, 0.5], [1.0, 0.0]) + kl([0.0, 1.0], [1.0, 0.0])
    assert softmax_kl(p[None], q[None], valid, dim=-1).item() == pytest.approx(expected, rel=1e-5)


# -- the module -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"suppress_factor": 1.5}, "suppress_factor"),
        ({"top_fraction": 0.0}, "top_fraction"),
        ({"boost_factor": -1.0}, "boost_factor"),
        ({"retain_boost": -0.1}, "retain_boost"),
        ({"adapter_size": 0}, "adapter_size"),
        ({"adapter_position": "middle"}, "adapter_position"),
        ({"layers": []}, "layers"),
        ({"layers": [5]}, "layer 5 does not exist"),
        ({"retain_loss": "mse"}, "retain_loss"),
        ({"suppression_weight": 0.0, "refusal_weight": 0.0}, "nothing would be unlearned"),
        ({"lm": {"name_or_path": "tiny-llama", "tiny": TINY, "lora": {"r": 4}}}, "lora"),
        ({"mode": "released"}, "mode='released' is invalid"),
        ({"mode": "paper", "fact_tags": ["NOUN", "ENTITY"]}, "fact_tags"),
        ({"mode": "paper", "fact_tags": []}, "fact_tags"),
        ({"mode": "paper", "suppression_weight": 0.0}, "nothing would be unlearned"),
    ],
)
def test_bad_arguments_are_errors_that_name_them(kwargs, message):
    kwargs = {"lm": CausalLMSpec(tiny=TINY), "mode": "trustlit", **kwargs}
    with pytest.raises(ValueError, match=message):
        AttentionShifting(**kwargs)


@pytest.mark.parametrize(("arch", "position"), [("llama", "output"), ("qwen2", "input"), ("gpt2", "input")])
def test_starts_at_the_reference_and_only_the_adapters_get_gradients(arch, position):
    torch.manual_seed(0)
    spec = CausalLMSpec(name_or_path=f"tiny-{arch}", tiny=TINY)
    if position == "output":  # the default layers [-2, -1] include layer 0, which no output adapter precedes
        with pytest.warns(UserWarning, match="layer 0's attention comes before every adapter"):
            module = AttentionShifting(lm=spec, mode="trustlit", adapter_position=position)
    else:
        module = AttentionShifting(lm=spec, mode="trustlit", adapter_position=position)
    assert module.model.config._attn_implementation == "eager"
    batch = next(iter(forget_retain_data(module).train_dataloader()))
    with torch.no_grad():
        adapted, maps = module.attention_maps(batch["forget"])
        reference, reference_maps = module.attention_maps(batch["forget"], adapters=False)
    torch.testing.assert_close(adapted, reference)  # up-projections start at zero
    torch.testing.assert_close(maps, reference_maps)
    valid = batch["forget"]["attention_mask"].bool()
    assert len(maps) == 2 and maps[0].shape == (valid.shape[0], 2, valid.shape[1], valid.shape[1])
    torch.testing.assert_close(maps[1].sum(-1).transpose(1, 2)[valid], torch.ones(int(valid.sum()), 2))

    terms = module.losses(batch)
    assert set(terms) >= {"loss", "suppression", "retention", "retain_nll", "refusal_nll", "forget_nll"}
    assert all(torch.isfinite(value) for value in terms.values())
    terms["loss"].backward()
    for name, parameter in module.model.named_parameters():
        if ADAPTER_NAME in name:
            assert parameter.requires_grad
        else:
            assert not parameter.requires_grad and parameter.grad is None, name
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for n, p in module.model.named_parameters() if ".up." in n)

    # importance comes from pi_ref once per sample, then from the cache
    forget = batch["forget"]
    scores = module.reference_pass(forget)[2]
    assert {("forget10", int(i)) for i in forget["index"]} <= set(module._importance_cache)
    torch.testing.assert_close(scores.sum(-1), torch.ones(len(scores)))
    assert not scores[~module.candidates(forget)].any(), "padding and special tokens are never important"
    fact = module.selected_tokens(forget, scores)
    assert (fact.sum(-1) == torch.ceil(0.3 * module.candidates(forget).sum(-1) - 1e-9)).all()


def test_refusal_term_without_refusal_batches_is_an_error_naming_the_setting():
    module = AttentionShifting(lm=CausalLMSpec(tiny=TINY), mode="trustlit", layers=[-1])
    batch = next(iter(forget_retain_data(module, refusals=None).train_dataloader()))
    with pytest.raises(ValueError, match="refusals"):
        module.losses(batch)
    AttentionShifting(lm=CausalLMSpec(tiny=TINY), mode="trustlit", layers=[-1], refusal_weight=0.0).losses(batch)
    # paper mode's released objective has no refusal term, so it needs no refusal batches
    paper = AttentionShifting(lm=CausalLMSpec(tiny=TINY), layers=[-1])
    assert (paper.hparams.refusal_weight, paper.hparams.retain_weight) == (0.0, 0.0)
    assert "refusal_nll" not in paper.losses(batch)


@pytest.fixture(scope="module")
def finetuned(tmp_path_factory) -> str:
    """A tiny Llama fine-tuned a little on every author, saved as a model directory."""
    L.seed_everything(0)
    module = CausalLMFineTuning(lm=CausalLMSpec(tiny=TINY), lr=1e-2, generate=False)
    data = QADataModule(
        source="fictitious",
        train_split="full",
        eval_splits=[],
        batch_size=16,
        max_length=64,
        prompt_format="chat",
        fictitious=CORPUS,
    )
    quiet_trainer(max_steps=60).fit(module, data)
    path = tmp_path_factory.mktemp("finetuned")
    module.model.save_pretrained(path)
    module.tokenizer.save_pretrained(path)
    return str(path)


def answer_nll_of(model: torch.nn.Module, data: ForgetRetainDataModule, split: int) -> float:
    """Token-mean answer NLL over a whole evaluation split (0: forget, 1: retain)."""
    dataset = data.eval_datasets[split]
    loader = DataLoader(dataset, batch_size=32, collate_fn=data.collator(dataset.name))
    logps, counts = zip(*(sequence_logprobs(model, batch) for batch in loader), strict=True)
    return token_mean_nll(torch.cat(logps), torch.cat(counts)).item()


@pytest.fixture(scope="module")
def unlearned(finetuned):
    """Before/after measurements around a short Attention-Shifting run on the fine-tuned model."""
    L.seed_everything(0)
    # adapters on the attention inputs: in a 2-layer model, adapters on the outputs (the paper code's
    # position) can only move the last layer's attention, through the single adapter below it
    module = AttentionShifting(
        lm=CausalLMSpec(name_or_path=finetuned), mode="trustlit", adapter_position="input", lr=1e-2, generate=False
    )
    data = forget_retain_data(module)
    base = {n: p.detach().clone() for n, p in module.model.named_parameters() if ADAPTER_NAME not in n}
    adapters = {n: p.detach().clone() for n, p in module.model.named_parameters() if ADAPTER_NAME in n}
    module.eval()
    with torch.no_grad():
        before = {"forget": answer_nll_of(module.model, data, 0), "retain": answer_nll_of(module.model, data, 1)}
    module.train()
    quiet_trainer(max_steps=100).fit(module, data)
    module.eval()
    with torch.no_grad():
        after = {"forget": answer_nll_of(module.model, data, 0), "retain": answer_nll_of(module.model, data, 1)}
        forget = data.collator(data.forget_split)(data.eval_datasets[0].samples)  # the whole forget split
        _, ref_maps, scores = module.reference_pass(forget)
        fact = module.selected_tokens(forget, scores)
        queries = answer_query_mask(forget["labels"])
        _, maps = module.attention_maps(forget)
        before["fact_attention"] = sum(attention_mass(m, fact, queries).item() for m in ref_maps) / len(maps)
        after["fact_attention"] = sum(attention_mass(m, fact, queries).item() for m in maps) / len(maps)
    return {"module": module, "base": base, "adapters": adapters, "before": before, "after": after}


def test_unlearning_trains_the_adapters_and_leaves_the_base_weights_alone(unlearned):
    weights = dict(unlearned["module"].model.named_parameters())
    for name, value in unlearned["base"].items():
        assert torch.equal(weights[name], value), f"base weight {name} changed"
    changed = [name for name, value in unlearned["adapters"].items() if not torch.equal(weights[name], value)]
    assert len(changed) >= len(unlearned["adapters"]) // 2, "the adapters did not train"


def test_attention_on_fact_bearing_forget_tokens_decreases(unlearned):
    before, after = unlearned["before"]["fact_attention"], unlearned["after"]["fact_attention"]
    assert after < 0.95 * before, (before, after)


def test_forget_nll_rises_more_than_retain_nll(unlearned):
    before, after = unlearned["before"], unlearned["after"]
    forget_rise, retain_rise = after["forget"] - before["forget"], after["retain"] - before["retain"]
    assert forget_rise > 0.5 and forget_rise > 3 * retain_rise, (before, after)


def test_the_adapters_are_in_the_state_dict_and_reload(unlearned, finetuned):
    module = unlearned["module"]
    fresh = AttentionShifting(
        lm=CausalLMSpec(name_or_path=finetuned), mode="trustlit", adapter_position="input", generate=False
    )
    fresh.load_state_dict(module.state_dict())
    batch = next(iter(forget_retain_data(fresh).train_dataloader()))["forget"]
    with torch.no_grad():
        torch.testing.assert_close(fresh.logits(batch), module.logits(batch))
        assert not torch.allclose(fresh.logits(batch), fresh.attention_maps(batch, adapters=False)[0])


def test_paper_mode_training_reduces_the_suppression_loss(finetuned):
    """Adapters on the attention outputs (as released) move the last layer's attention toward the
    released target: the suppression loss on a fixed batch falls; the base weights stay."""
    L.seed_everything(0)
    module = AttentionShifting(lm=CausalLMSpec(name_or_path=finetuned), layers=[-1], lr=1e-2, generate=False)
    data = forget_retain_data(module, refusals=None)
    batch = next(iter(data.train_dataloader()))
    base = {n: p.detach().clone() for n, p in module.model.named_parameters() if ADAPTER_NAME not in n}
    with torch.no_grad():
        before = module.losses(batch)
    assert before["retention"].item() == pytest.approx(0.0, abs=1e-6), "training starts at pi_ref"
    quiet_trainer(max_steps=30).fit(module, data)
    module.eval()
    with torch.no_grad():
        after = module.losses(batch)
    assert after["suppression"] < 0.95 * before["suppression"], (before, after)
    assert after["retention"] > 0 and after["loss"] < before["loss"]
    weights = dict(module.model.named_parameters())
    assert all(torch.equal(weights[name], value) for name, value in base.items())
