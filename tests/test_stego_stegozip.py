"""StegoZip (trustlit/stego/stegozip.py, trustlit/data/stego_messages.py): self-information and pruning under a
hand-set LM, the adaptive quantile, the self-check / restoration protocol, the keystream, the end-to-end codec on a
tiny LM, the restoration-pair DataModule and the restorer's training step."""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from helpers import SHARED_DATA, quiet_trainer
from torch import nn

from trustlit.data.stego_messages import StegoMessageDataModule, split_messages
from trustlit.llm.loading import build_tiny_causal_lm, build_tokenizer
from trustlit.stego import stegozip as sz
from trustlit.stego.coding import StegoSettings

MESSAGE = "The author Jaime Vasquez was born in the city of Santiago in 1958."
# hand-set logits: distinct, so that the quantile falls between words (ties at the threshold are kept)
FAVOURED = {" the": 10.0, " in": 9.5, " of": 9.0, " was": 8.5, " born": 8.0, " S": 9.0, "an": 9.0, "ti": 9.0}
TINY_LM = {"name_or_path": "tiny-llama", "tiny": {"hidden_size": 32, "num_layers": 1, "num_heads": 2}}


class HandSetLM(nn.Module):
    """Every position predicts the same distribution: logit ``favoured[token]``, 0 for all other tokens."""

    def __init__(self, vocab_size: int, favoured: dict[int, float]) -> None:
        super().__init__()
        self.logits = torch.zeros(vocab_size)
        for token_id, logit in favoured.items():
            self.logits[token_id] = logit
        self.anchor = nn.Parameter(torch.zeros(1))  # gives the model a device

    def forward(self, input_ids: torch.Tensor, **_: object) -> SimpleNamespace:
        return SimpleNamespace(logits=self.logits.expand(*input_ids.shape, -1).clone())


@pytest.fixture(scope="module")
def hand_set():
    tokenizer = build_tokenizer()
    favoured = {i: logit for w, logit in FAVOURED.items() for i in tokenizer.encode(w)}
    return HandSetLM(len(tokenizer), favoured), tokenizer


def test_word_self_information_is_the_sum_over_its_tokens(hand_set):
    model, tokenizer = hand_set
    words = MESSAGE.split()
    info, mean = sz.word_self_information(model, tokenizer, words)
    log_z = torch.logsumexp(model.logits.double(), 0).item()
    ids = tokenizer(" ".join(words), add_special_tokens=False)["input_ids"]
    token_info = [log_z - model.logits[i].item() for i in ids]
    assert mean == pytest.approx(np.mean(token_info))
    assert info.sum() == pytest.approx(sum(token_info))
    per_word = [
        sum(log_z - model.logits[i].item() for i in tokenizer.encode((" " if k else "") + w))
        for k, w in enumerate(words)
    ]
    assert info == pytest.approx(per_word)


def test_pruning_removes_predictable_words_and_keeps_named_entities(hand_set):
    model, tokenizer = hand_set
    pruned = sz.prune(model, tokenizer, MESSAGE, alpha=0.4, eta=0.0)
    kept = [w for w, p in zip(pruned.words, pruned.pruned, strict=True) if not p]
    removed = [w for w, p in zip(pruned.words, pruned.pruned, strict=True) if p]
    assert removed == ["was", "in", "the", "of", "in"]  # the 0.4-quantile falls between "was" and "born"
    assert {"Jaime", "Vasquez", "Santiago", "1958."} <= set(kept)  # Santiago is favoured but is an entity
    assert pruned.text.count("[]") == len(removed)
    assert pruned.target.replace("[", "").replace("]", "") == MESSAGE


def test_entity_mask_and_adaptive_quantile_closed_forms():
    words = ["Yes,", "Jaime", "Vasquez", "was", "born", "in", "1958.", "She", "wrote", "books", "in", "Paris."]
    assert [w for w, e in zip(words, sz.entity_mask(words), strict=True) if e] == [
        "Jaime",
        "Vasquez",
        "1958.",
        "Paris.",
    ]
    assert sz.entity_mask(["Jaime", "Vasquez", "wrote"]) == [True, True, False]
    assert sz.adaptive_quantile(0.4, 1.0, 6.0, 4.0) == pytest.approx(0.4 * (1 - 0.5))
    assert sz.adaptive_quantile(0.4, 1.0, 2.0, 4.0) == pytest.approx(0.6)
    assert sz.adaptive_quantile(0.4, 1.0, 20.0, 4.0) == 0.0
    assert sz.adaptive_quantile(0.4, 1.0, 5.0, None) == 0.4
    info = np.array([1.0, 2.0, 3.0, 4.0, np.inf])
    assert sz.prune_mask(info, [False, True, False, False, False], 0.5).tolist() == [True, False, False, False, False]


def test_self_check_marks_wrong_fills_and_restore_is_lossless(monkeypatch):
    words = ["the", "cat", "sat", "on", "a", "mat", "today"]
    pruned = sz.Pruned(words, np.array([1, 0, 0, 1, 1, 0, 0], dtype=bool), 0.0, 0.4)
    fills = ["the", "in", "a"]  # the restorer gets "on" wrong
    monkeypatch.setattr(sz, "restorer_fills", lambda model, tokenizer, text, **_: list(fills))
    checked = sz.self_check(None, None, pruned)
    assert checked == "[] cat sat [on] [] mat today"
    assert sz.restore(None, None, checked) == " ".join(words)
    fills[:] = ["the"]  # a wrong number of fills: the message goes unpruned
    assert sz.self_check(None, None, pruned) == " ".join(words)
    with pytest.raises(ValueError, match="fills for 3 slots"):
        sz.restore(None, None, checked)


def test_keystream_masks_reversibly_and_looks_uniform():
    bits = [0] * 4096
    masked = sz.xor_bits(bits, b"key")
    assert sz.xor_bits(masked, b"key") == bits
    assert masked != sz.xor_bits(bits, b"other key")
    # 4096 fair bits: the count of ones is within 4.5 standard deviations of 2048 (false alarm < 1e-5)
    assert abs(sum(masked) - 2048) < 4.5 * math.sqrt(1024)


@pytest.mark.slow
def test_codec_round_trip_end_to_end_on_a_tiny_lm(monkeypatch):
    model, tokenizer = build_tiny_causal_lm(hidden_size=32, num_layers=1, num_heads=2, seed=1)
    model.eval()
    message = "Jaime Vasquez was born in Santiago in 1958 to a chef and a painter."

    def half_right(model, tokenizer, text, **_):  # a restorer that fills every other slot correctly
        slots = [w for w, p in zip(pruned.words, pruned.pruned, strict=True) if p]
        return [w if i % 2 == 0 else "x" for i, w in enumerate(slots)]

    pruned = sz.prune(model, tokenizer, message)
    monkeypatch.setattr(sz, "restorer_fills", half_right)
    codec = sz.StegoZipCodec((model, tokenizer), (model, tokenizer), "Q:", settings=StegoSettings(top_k=16))
    sent = codec.send(message)
    assert sent["checked"] != message and "[]" in sent["checked"]
    received = codec.receive(sent["stego_text"], len(sent["bits"]))
    assert received["checked"] == sent["checked"]
    assert received["restored"] == message


@pytest.mark.slow
def test_messages_hold_out_whole_authors_and_pairs_have_the_restorer_format():
    train = split_messages(["fictitious"], "train", 0.25, 0)
    test = split_messages(["fictitious"], "test", 0.25, 0)
    assert train and test and not set(train) & set(test)
    tofu = split_messages([str(SHARED_DATA / "tofu")], "test", 0.1, 0, max_per_source=5)
    assert len(tofu) == 5
    model, tokenizer = build_tiny_causal_lm(hidden_size=32, num_layers=1, num_heads=2)
    data = StegoMessageDataModule(max_messages=6, stable_ratio=0.5, seed=1)
    data.pruner, data.tokenizer = model.eval(), tokenizer
    records = data.load_records("train")
    assert data.reference_info > 0
    for r in records:
        assert r["question"].startswith(sz.INSTRUCTION)
        assert r["answer"].replace("[", "").replace("]", "") == " ".join(r["message"].split())
    assert any(r["question"].endswith(r["answer"]) for r in records)  # the stable pairs
    with pytest.raises(ValueError, match=r"alpha=1\.5"):
        StegoMessageDataModule(alpha=1.5)
    with pytest.raises(FileNotFoundError, match="neither 'fictitious'"):
        StegoMessageDataModule(sources=["/nonexistent"])


def test_restorer_trains_with_lora_on_the_pairs():
    lm = {**TINY_LM, "lora": {"r": 4, "lora_alpha": 8, "target_modules": ["q_proj", "v_proj"]}}
    module = sz.StegoZipRestorer(lm=lm, lr=1e-2, generate=False)
    data = StegoMessageDataModule(max_messages=4, batch_size=2, max_length=384)
    before = {n: p.clone() for n, p in module.model.named_parameters() if p.requires_grad}
    quiet_trainer(max_steps=2).fit(module, datamodule=data)
    assert before and all("lora" in n for n in before)
    assert any(not torch.equal(before[n], p) for n, p in module.model.named_parameters() if n in before)


def test_bad_messages_are_refused(hand_set):
    with pytest.raises(ValueError, match="contains '\\[' or '\\]'"):
        sz.prune(*hand_set, "a [bracketed] word")
    with pytest.raises(ValueError, match="non-empty string"):
        sz.prune(*hand_set, "   ")
    with pytest.raises(ValueError, match="alpha=2"):
        sz.adaptive_quantile(2, 1.0, 1.0, 1.0)


@pytest.mark.slow
def test_restoration_scores_closed_forms():
    scores = sz.restoration_scores(["a b c", "x y"], ["a  b c", "x z"])
    assert scores["exact_match"] == 0.5
    assert scores["rougeL_f1"] == pytest.approx((1.0 + 0.5) / 2)
    assert 0 < scores["minilm_cosine"] < 1
    assert sz.restoration_scores(["same text"], ["same text"])["minilm_cosine"] == pytest.approx(1.0, abs=1e-5)
