"""Arithmetic-coding steganography and rank coding (trustlit/stego/coding.py) on a tiny LM built from config:
exact round trips, detection of modified stego texts, the quantized distribution against the LM's, bad input."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch
from scipy import stats

from trustlit.llm.loading import build_tiny_causal_lm
from trustlit.stego.coding import (
    IntervalCoder,
    StegoCorruptionError,
    StegoSettings,
    bits_to_bytes,
    bytes_to_bits,
    checksum_bits,
    compress,
    decompress,
    embed_bits,
    embed_tokens,
    extract_bits,
    quantized_candidates,
    select_candidate,
    shared_prefix_length,
    token_at_rank,
    token_rank,
)

PROMPT = "Question: Where was the author born?\nAnswer:"


@pytest.fixture(scope="module")
def lm():
    model, tokenizer = build_tiny_causal_lm(hidden_size=32, num_layers=1, num_heads=2, seed=0)
    return model.eval(), tokenizer


def random_bits(n: int, seed: int) -> list[int]:
    rng = random.Random(seed)
    return [rng.getrandbits(1) for _ in range(n)]


@pytest.mark.parametrize(("n_bits", "seed"), [(0, 0), (1, 1), (17, 2), (64, 3)])
def test_embed_extract_round_trip_exactly(lm, n_bits, seed):
    bits = random_bits(n_bits, seed)
    text = embed_bits(*lm, bits, PROMPT, seed=seed)
    assert extract_bits(*lm, text, PROMPT, n_bits) == bits


def test_the_seed_changes_the_text_not_the_bits(lm):
    bits = random_bits(40, 7)
    texts = {embed_bits(*lm, bits, PROMPT, seed=s) for s in range(2)}
    assert len(texts) > 1
    assert all(extract_bits(*lm, t, PROMPT, 40) == bits for t in texts)


def test_settings_must_match_on_both_sides(lm):
    bits = random_bits(48, 8)
    settings = StegoSettings(top_k=50, temperature=1.3, precision=40)
    text = embed_bits(*lm, bits, PROMPT, settings=settings)
    assert extract_bits(*lm, text, PROMPT, 48, settings=settings) == bits
    with pytest.raises(StegoCorruptionError):
        extract_bits(*lm, text, PROMPT, 48)


@pytest.mark.parametrize("edit", ["replace_word", "append", "truncate", "other_prompt"])
def test_a_modified_stego_text_is_reported(lm, edit):
    bits = random_bits(64, 9)
    text = embed_bits(*lm, bits, PROMPT)
    prompt = PROMPT
    if edit == "replace_word":
        words = text.split(" ")
        words[len(words) // 2] = "lighthouse"
        text = " ".join(words)
    elif edit == "append":
        text += " and more"
    elif edit == "truncate":
        text = text[: len(text) // 2]
    else:
        prompt = "Question: Who wrote it?\nAnswer:"
    with pytest.raises(StegoCorruptionError, match="corrupted"):
        extract_bits(*lm, text, prompt, 64)


@pytest.mark.parametrize("bits", [[0] + [1] * 30, [1] + [0] * 40])
def test_bits_near_a_bit_boundary_do_not_stall_the_embedder(lm, bits):
    """0111... / 1000... put the point next to the interval's midpoint: every step's interval straddles it, so
    progress needs each chosen sub-interval to be strictly smaller (>= 2 candidates, widths >= 1)."""
    tokens = embed_tokens(*lm, bits, PROMPT, max_tokens=400)
    text = lm[1].decode(tokens, clean_up_tokenization_spaces=False)
    assert extract_bits(*lm, text, PROMPT, len(bits)) == bits


def test_no_canonical_candidate_is_a_clear_error(lm, monkeypatch):
    text = embed_bits(*lm, random_bits(8, 4), PROMPT)
    monkeypatch.setattr(IntervalCoder, "canonical", lambda self, candidates: [False] * len(candidates))
    with pytest.raises(ValueError, match="keeps the tokenization canonical") as embedding:
        embed_tokens(*lm, random_bits(8, 4), PROMPT)
    assert not isinstance(embedding.value, StegoCorruptionError)
    with pytest.raises(StegoCorruptionError, match="corrupted at token 0"):
        extract_bits(*lm, text, PROMPT, 8)


def test_a_last_token_swapped_for_another_candidate_is_caught_by_the_crc(lm):
    """The swapped token is a candidate of its step, keeps the tokenization and fixes all bits at the last token:
    every check but the checksum passes."""
    model, tokenizer = lm
    bits = random_bits(24, 5)
    tokens = embed_tokens(model, tokenizer, bits, PROMPT)
    total = len(bits) + 16
    coder = IntervalCoder(model, tokenizer, PROMPT, StegoSettings())
    fixed: list[int] = []
    for token_id in tokens[:-1]:
        token_ids, widths = coder.candidates()
        fixed += coder.choose(token_ids.index(token_id), token_ids, widths)
    token_ids, widths = coder.candidates()
    true_index = token_ids.index(tokens[-1])

    def stream_with(index: int) -> list[int]:
        low = coder.low + sum(widths[:index])
        n = shared_prefix_length(low, low + widths[index] - 1, coder.precision)
        return (fixed + [(low >> (coder.precision - 1 - i)) & 1 for i in range(n)])[:total]

    true_stream = stream_with(true_index)
    swap = next(
        i
        for i in range(len(token_ids))
        if i != true_index and len(stream_with(i)) == total and stream_with(i) != true_stream
    )
    forged = [*tokens[:-1], token_ids[swap]]
    text = tokenizer.decode(forged, clean_up_tokenization_spaces=False)
    assert tokenizer(text, add_special_tokens=False)["input_ids"] == forged
    assert stream_with(swap)[len(bits) :] != checksum_bits(stream_with(swap)[: len(bits)])
    with pytest.raises(StegoCorruptionError, match="CRC-16"):
        extract_bits(model, tokenizer, text, PROMPT, len(bits))


def test_shared_prefix_length_closed_forms():
    assert shared_prefix_length(0b1010, 0b1011, 4) == 3
    assert shared_prefix_length(0b0111, 0b1000, 4) == 0
    assert shared_prefix_length(0b0110, 0b0110, 4) == 4


def test_quantized_widths_follow_the_distribution_within_one_unit():
    """Closed form: with K kept tokens each width is floor(q_i * (R - K)) + 1 (+ the remainder, < K, on the top
    token), so |w_i / R - q_i| is at most the dropped mass plus (1 + K q_i) / R, and 2K / R more for the top token."""
    torch.manual_seed(0)
    logits = torch.randn(500, dtype=torch.float64) * 3
    allowed = torch.ones(500, dtype=torch.bool)
    allowed[::7] = False
    interval = 1 << 20
    token_ids, widths = quantized_candidates(logits, interval, allowed, temperature=0.8)
    assert sum(widths) == interval and min(widths) >= 1
    q = torch.softmax((logits / 0.8).masked_fill(~allowed, float("-inf")), 0)
    assert not set(token_ids) & set(range(0, 500, 7))
    kept = q[token_ids]
    dropped = 1 - float(kept.sum())
    error = np.abs(np.asarray(widths) / interval - kept.numpy())
    bound = (1 + len(widths) * kept.numpy()) / interval + dropped + 1e-12
    assert (error[1:] <= bound[1:]).all()
    assert error[0] <= bound[0] + 2 * len(widths) / interval


def test_stego_tokens_are_distributed_as_the_lm_samples(lm):
    """Ziegler's scheme with uniformly random bits draws each token with probability width / interval, the LM's
    (top-k, temperature 1) probability up to the quantisation error (about K / interval, K candidates). Closed form
    on the quantized widths, then a chi-square goodness of fit of the token that embed_tokens' selection picks for
    4000 uniformly random 26-bit message windows against the LM's softmax; false alarm rate 1e-3 (fixed seeds:
    deterministic). End to end, the first stego token of random bit strings lands among the candidates."""
    model, tokenizer = lm
    coder = IntervalCoder(model, tokenizer, PROMPT, StegoSettings(12, 1.0, 26))
    token_ids, widths = coder.candidates()
    expected = np.asarray(widths, dtype=np.float64) / sum(widths)
    fresh = IntervalCoder(model, tokenizer, PROMPT, StegoSettings(12, 1.0, 26))
    lm_probs = torch.softmax(fresh.stepper.logits()[token_ids], 0).numpy()
    assert np.abs(expected - lm_probs).max() < 1e-6
    windows = np.random.default_rng(0).integers(0, 1 << 26, size=4000)
    observed = np.bincount([select_candidate(widths, int(w)) for w in windows], minlength=len(widths))
    big = lm_probs * len(windows) >= 5  # merge the rare tokens into one bin
    obs = np.append(observed[big], observed[~big].sum())
    exp = np.append(lm_probs[big], lm_probs[~big].sum()) * len(windows)
    assert stats.chisquare(obs[exp > 0], exp[exp > 0]).pvalue > 1e-3
    first = {
        embed_tokens(model, tokenizer, random_bits(8, i), PROMPT, settings=StegoSettings(12, 1.0))[0] for i in range(5)
    }
    assert first <= set(token_ids)


def test_rank_and_token_at_rank_are_inverse_with_ties():
    logits = torch.tensor([1.0, 3.0, 3.0, -2.0, 3.0, 0.5], dtype=torch.float64)
    assert [token_rank(logits, t) for t in range(6)] == [3, 0, 1, 5, 2, 4]
    assert [token_at_rank(logits, r) for r in range(6)] == [1, 2, 4, 0, 5, 3]


@pytest.mark.parametrize(
    "message",
    [
        "The author Jaime Vasquez was born in Santiago, Chile, in 1958.",
        "café ☃ naïve — 東京 🙂",
        "x",
        "  two  spaces\nand a newline  ",
    ],
)
def test_rank_coding_is_lossless(lm, message):
    data = compress(*lm, message)
    assert decompress(*lm, data) == message
    assert decompress(*lm, compress(*lm, message, prefix=PROMPT, exponent=1.2), prefix=PROMPT, exponent=1.2) == message


def test_rank_coding_compresses_what_the_lm_predicts(lm):
    """A text the LM ranks first at every step codes to fewer bits than its UTF-8 form."""
    model, tokenizer = lm
    from trustlit.stego.coding import LMStepper, context_ids

    stepper, ids = LMStepper(model, context_ids(tokenizer, "")), []
    special = set(tokenizer.all_special_ids)
    while len(ids) < 30:
        order = torch.argsort(stepper.logits(), descending=True, stable=True).tolist()
        ids.append(next(t for t in order if t not in special))
        stepper.feed(ids[-1])
    text = tokenizer.decode(ids)
    assert len(compress(model, tokenizer, text)) * 8 < len(text.encode()) * 8 / 2


def test_bits_bytes_helpers_round_trip():
    data = bytes(range(0, 256, 17))
    assert bits_to_bytes(bytes_to_bits(data)) == data
    assert bytes_to_bits(b"\x80")[:2] == [1, 0]


def test_bad_input_is_refused(lm):
    with pytest.raises(ValueError, match="bits must be a sequence of 0/1"):
        embed_bits(*lm, [0, 2, 1], PROMPT)
    with pytest.raises(ValueError, match="bits must be a sequence of 0/1"):
        embed_bits(*lm, "0101", PROMPT)
    with pytest.raises(ValueError, match="n_bits=-1"):
        extract_bits(*lm, "text", PROMPT, -1)
    with pytest.raises(ValueError, match="temperature=0"):
        StegoSettings(temperature=0)
    with pytest.raises(ValueError, match="top_k=1 is invalid"):
        StegoSettings(top_k=1)
    with pytest.raises(ValueError, match="cannot be encoded round-trip"):
        compress(*lm, "hidden <|endoftext|> marker")
    with pytest.raises(ValueError, match="message must be a non-empty string"):
        compress(*lm, "")
    with pytest.raises(ValueError, match="data must be bytes"):
        decompress(*lm, "not bytes")
