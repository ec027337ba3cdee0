"""Arithmetic-coding steganography (Ziegler et al. 2019) and the LM's lossless rank coding (LLMZip / StegoZip ICC).

**Arithmetic-coding steganography** (Ziegler, Deng, Rush, "Neural Linguistic Steganography", EMNLP 2019). The
secret bits b_1 b_2 ... are read as a point x in [0, 1). Generation keeps an integer interval [low, high) of
``precision`` bits; at each step the LM's next-token distribution, cut to the ``top_k`` tokens and sharpened by the
``temperature`` tau (q_i ∝ exp(z_i / tau)), is quantized over the K tokens with q_i * R >= 1 (R = high - low, at
least 2 tokens) into sub-intervals of width c_i = floor(q_i * (R - K)) + 1 (the remainder goes to the most likely
token); the token whose sub-interval holds x is emitted, and the leading bits that ``low`` and ``high - 1`` share
are fixed, shifted out and the interval rescaled. The receiver replays the same intervals from the tokens and reads
the fixed bits back. With uniformly random bits (the StegoZip keystream makes them so), a token is drawn with
probability c_i / R, which differs from the top-k, temperature-tau q_i by the quantisation error (about (1 + K q_i)
/ R, plus the dropped mass), and the canonical-tokenization filter below removes candidates: the stego text is
close to, not exactly, distributed as the model's samples. No provably secure scheme (Discop) is implemented.

Beyond the paper, so that a modified text fails loudly instead of decoding to garbage: a CRC-16 of the bits is
embedded after them; every token must be one the embedder could have emitted (in the quantized candidate set, and
the text must retokenize to exactly the generated tokens: candidates that would make the text tokenize otherwise
are excluded on both sides); the last token must be the one that fixed the last bit.

**Rank coding** (``compress`` / ``decompress``; LLMZip, Valmeekam et al. 2023; StegoZip's index-based
compression coding, Jiang et al. 2025). The message's tokens w_1..w_s, then the end-of-text token, are replaced
by their ranks r_t = #{v : p(v | w_<t) > p(w_t | w_<t)} (ties by token id) under the LM, and the ranks are
range-coded by ``constriction`` under a fixed Zipf prior P(r) ∝ (r + 1)^-s (s = ``exponent``) over the vocabulary.
``decompress`` has no integrity check of its own: corrupted data decodes to some other text (the stego CRC covers
the StegoZip path, bits -> stego text -> bits).

Both coders run the LM one token at a time with its key/value cache, in the same order on both sides, so sender
and receiver compute bit-identical distributions (on the same software and hardware: LM steganography needs that).

Notes: docs/methods/arithmetic_stego.md
"""

from __future__ import annotations

import binascii
import functools
import random
from collections.abc import Sequence
from dataclasses import dataclass

import constriction
import numpy as np
import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

# Ziegler et al.'s released experiment settings (run_single.py): top-300 tokens, temperature 0.9, 26-bit intervals
DEFAULT_TOP_K = 300
DEFAULT_TEMPERATURE = 0.9
DEFAULT_PRECISION = 26
CHECKSUM_BITS = 16
CANONICAL_WINDOW = 8  # tokens of left context used to check that a candidate keeps the tokenization canonical
DEFAULT_RANK_EXPONENT = 1.25  # Zipf exponent: maximum likelihood on SmolLM2 ranks of training messages (docs)
MAX_STEGO_TOKENS = 4096


class StegoCorruptionError(ValueError):
    """A stego text that the embedder cannot have produced with this model, prompt and bit count."""


class LMStepper:
    """The LM's next-token logits, one token at a time with the key/value cache (identical on both sides)."""

    def __init__(self, model: PreTrainedModel, context_ids: Sequence[int]) -> None:
        self.model = model
        self.device = next(model.parameters()).device
        self.past = None
        self.pending = list(context_ids)

    @torch.no_grad()
    def logits(self) -> torch.Tensor:
        """Float64 logits [V] of the next token given everything fed so far."""
        inputs = torch.tensor([self.pending], dtype=torch.long, device=self.device)
        out = self.model(input_ids=inputs, cache=self.past, use_cache=True, logits_to_keep=1)
        self.past = out.cache
        self.pending = []
        return out.logits[0, -1].double().cpu()

    def feed(self, token_id: int) -> None:
        self.pending.append(int(token_id))


def context_ids(tokenizer: PreTrainedTokenizerBase, prompt: str) -> list[int]:
    """The prompt's tokens; an empty prompt conditions on the BOS (or end-of-text) token alone."""
    if not isinstance(prompt, str):
        raise ValueError(f"prompt must be a string, got {type(prompt).__name__}")
    ids = tokenizer(prompt, add_special_tokens=False)["input_ids"] if prompt else []
    if not ids:
        start = tokenizer.bos_token_id if tokenizer.bos_token_id is not None else tokenizer.eos_token_id
        ids = [start]
    return ids


def message_token_ids(tokenizer: PreTrainedTokenizerBase, message: str) -> list[int]:
    """The message's tokens; ValueError when the tokenizer cannot encode it so that it decodes back exactly."""
    if not isinstance(message, str) or not message:
        raise ValueError(f"message must be a non-empty string, got {message!r}")
    ids = tokenizer(message, add_special_tokens=False)["input_ids"]
    special = set(tokenizer.all_special_ids)
    decoded = tokenizer.decode(ids, clean_up_tokenization_spaces=False)
    if decoded != message or special.intersection(ids):
        bad = sorted({c for c in message if c not in decoded}) or "special-token text"
        raise ValueError(
            f"message {message[:60]!r} cannot be encoded round-trip by the tokenizer (it decodes to "
            f"{decoded[:60]!r}; offending characters: {bad}): use characters the tokenizer covers"
        )
    return ids


# ---------------------------------------------------------------------------------------------------------------
# rank coding


def token_rank(logits: torch.Tensor, token_id: int) -> int:
    """How many tokens the LM ranks above ``token_id`` (higher logit, or equal logit and a smaller id)."""
    value = logits[token_id]
    return int((logits > value).sum()) + int((logits[:token_id] == value).sum())


def token_at_rank(logits: torch.Tensor, rank: int) -> int:
    """The inverse of :func:`token_rank`: a stable descending sort puts equal logits in id order."""
    return int(torch.argsort(logits, descending=True, stable=True)[rank])


@functools.lru_cache(maxsize=8)
def rank_prior(vocab_size: int, exponent: float) -> constriction.stream.model.Categorical:
    """The Zipf prior P(r) ∝ (r + 1)^-exponent over ranks 0..vocab_size-1, as a constriction entropy model."""
    if not exponent > 0:
        raise ValueError(f"exponent={exponent!r} is invalid, expected a number > 0")
    weights = np.arange(1, vocab_size + 1, dtype=np.float64) ** -float(exponent)
    return constriction.stream.model.Categorical(weights / weights.sum(), perfect=False)


def _words_to_bytes(words: np.ndarray) -> bytes:
    # big-endian words make the code's trailing zero bits trailing zero bytes, which the decoder restores
    return words.astype(">u4").tobytes().rstrip(b"\0")


def _bytes_to_words(data: bytes) -> np.ndarray:
    padded = data + b"\0" * (-len(data) % 4)
    return np.frombuffer(padded, dtype=">u4").astype(np.uint32)


def message_ranks(
    model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, message: str, prefix: str = ""
) -> list[int]:
    """The rank of each message token, then of the end-of-text token, under the LM given ``prefix``."""
    ids = [*message_token_ids(tokenizer, message), tokenizer.eos_token_id]
    stepper = LMStepper(model, context_ids(tokenizer, prefix))
    ranks = []
    for token_id in ids:
        ranks.append(token_rank(stepper.logits(), token_id))
        stepper.feed(token_id)
    return ranks


def compress(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    message: str,
    *,
    prefix: str = "",
    exponent: float = DEFAULT_RANK_EXPONENT,
) -> bytes:
    """The message as bytes: its token ranks under the LM, range-coded under the Zipf rank prior (module docstring)."""
    ranks = message_ranks(model, tokenizer, message, prefix)
    vocab_size = int(model.get_output_embeddings().weight.shape[0])
    encoder = constriction.stream.queue.RangeEncoder()
    encoder.encode(np.asarray(ranks, dtype=np.int32), rank_prior(vocab_size, exponent))
    return _words_to_bytes(encoder.get_compressed())


def decompress(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    data: bytes,
    *,
    prefix: str = "",
    exponent: float = DEFAULT_RANK_EXPONENT,
    max_tokens: int = MAX_STEGO_TOKENS,
) -> str:
    """The message :func:`compress` turned into ``data``, with the same model, tokenizer, prefix and exponent.

    No integrity check: other data decodes to some other text (or to no end of message within ``max_tokens``).
    """
    if not isinstance(data, bytes | bytearray):
        raise ValueError(f"data must be bytes, got {type(data).__name__}")
    vocab_size = int(model.get_output_embeddings().weight.shape[0])
    prior = rank_prior(vocab_size, exponent)
    decoder = constriction.stream.queue.RangeDecoder(_bytes_to_words(bytes(data)))
    stepper = LMStepper(model, context_ids(tokenizer, prefix))
    ids: list[int] = []
    while len(ids) < max_tokens:
        token_id = token_at_rank(stepper.logits(), int(decoder.decode(prior)))
        if token_id == tokenizer.eos_token_id:
            return tokenizer.decode(ids, clean_up_tokenization_spaces=False)
        ids.append(token_id)
        stepper.feed(token_id)
    raise ValueError(f"data decodes to no end of message within max_tokens={max_tokens}: it is not from compress")


# ---------------------------------------------------------------------------------------------------------------
# bits


def check_bits(bits: Sequence[int], name: str = "bits") -> list[int]:
    """``bits`` as a list of ints 0/1, or ValueError."""
    values = list(bits) if isinstance(bits, Sequence | np.ndarray) and not isinstance(bits, str) else None
    if values is None or any(b not in (0, 1) or isinstance(b, float) for b in values):
        raise ValueError(f"{name} must be a sequence of 0/1 integers, got {str(bits)[:60]}")
    return [int(b) for b in values]


def bytes_to_bits(data: bytes) -> list[int]:
    """Most significant bit first."""
    return [int(b) for b in np.unpackbits(np.frombuffer(bytes(data), dtype=np.uint8))]


def bits_to_bytes(bits: Sequence[int]) -> bytes:
    """Inverse of :func:`bytes_to_bits` (zero-padded to whole bytes)."""
    return np.packbits(np.asarray(bits, dtype=np.uint8)).tobytes()


def checksum_bits(bits: Sequence[int]) -> list[int]:
    """CRC-16-CCITT of the bit string and its length, as 16 bits."""
    crc = binascii.crc_hqx(bits_to_bytes(bits) + len(bits).to_bytes(8, "big"), 0xFFFF)
    return [(crc >> (CHECKSUM_BITS - 1 - i)) & 1 for i in range(CHECKSUM_BITS)]


# ---------------------------------------------------------------------------------------------------------------
# arithmetic-coding steganography


def quantized_candidates(
    logits: torch.Tensor, interval: int, allowed: torch.Tensor, temperature: float
) -> tuple[list[int], list[int]]:
    """Candidate tokens (most likely first) and their integer sub-interval widths, summing to ``interval``.

    q = softmax(logits / temperature) over the ``allowed`` tokens; the K tokens with q_i * interval >= 1 are kept,
    at least 2 (Ziegler's released code) when 2 are allowed, q renormalised over them; width
    c_i = floor(q_i * (interval - K)) + 1, the rounding remainder on the most likely token. Every width is >= 1, so
    with 2 or more candidates the chosen sub-interval is strictly smaller than the interval: an interval straddling
    a bit boundary shrinks until a bit is fixed (with one candidate of the whole width it would never shrink).
    """
    n_allowed = int(allowed.sum())
    if n_allowed == 0:
        raise ValueError("no candidate token is allowed: none of the top-k keeps the tokenization canonical")
    scores = (logits / temperature).masked_fill(~allowed, float("-inf"))
    order = torch.argsort(scores, descending=True, stable=True)[:n_allowed]
    q = torch.softmax(scores[order], dim=0)
    keep = min(n_allowed, interval, max(2, int((q * interval >= 1).sum())))
    q = q[:keep] / q[:keep].sum()
    widths = torch.floor(q * (interval - keep)).long() + 1
    widths[0] += interval - int(widths.sum())
    return order[:keep].tolist(), widths.tolist()


def shared_prefix_length(low: int, top: int, precision: int) -> int:
    """Number of leading bits that the ``precision``-bit integers ``low`` and ``top`` share."""
    return precision - (low ^ top).bit_length()


class IntervalCoder:
    """The shared state of embedder and extractor: the interval, the candidate filter, the tokens so far."""

    def __init__(
        self, model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, prompt: str, settings: StegoSettings
    ) -> None:
        self.tokenizer = tokenizer
        self.stepper = LMStepper(model, context_ids(tokenizer, prompt))
        self.top_k, self.temperature, self.precision = settings.top_k, settings.temperature, settings.precision
        self.low, self.high = 0, 1 << self.precision
        self.tokens: list[int] = []
        vocab_size = int(model.get_output_embeddings().weight.shape[0])
        self.allowed = torch.ones(vocab_size, dtype=torch.bool)
        self.allowed[[i for i in tokenizer.all_special_ids if i < vocab_size]] = False
        self.allowed[len(tokenizer) :] = False  # padding rows of the embedding matrix are no tokens

    def candidates(self) -> tuple[list[int], list[int]]:
        """This step's candidates and widths: the ``top_k`` most likely tokens that keep the tokenization canonical."""
        logits = self.stepper.logits()
        order = torch.argsort(logits.masked_fill(~self.allowed, float("-inf")), descending=True, stable=True)
        limit = self.top_k if self.top_k is not None else int(self.allowed.sum())
        allowed = torch.zeros_like(self.allowed)
        candidates = order[:limit].tolist()
        allowed[[t for t, ok in zip(candidates, self.canonical(candidates), strict=True) if ok]] = True
        return quantized_candidates(logits, self.high - self.low, allowed, self.temperature)

    def canonical(self, candidates: list[int]) -> list[bool]:
        """Whether each candidate, after the last tokens, retokenizes to itself (one batched tokenizer call)."""
        windows = [[*self.tokens[-CANONICAL_WINDOW:], token_id] for token_id in candidates]
        texts = self.tokenizer.batch_decode(windows, clean_up_tokenization_spaces=False)
        encoded = self.tokenizer(texts, add_special_tokens=False)["input_ids"]
        return [ids == window for ids, window in zip(encoded, windows, strict=True)]

    def choose(self, index: int, token_ids: list[int], widths: list[int]) -> list[int]:
        """Take candidate ``index``; return the bits it fixes and rescale the interval."""
        low = self.low + sum(widths[:index])
        top = low + widths[index] - 1
        fixed = shared_prefix_length(low, top, self.precision)
        mask = (1 << self.precision) - 1
        self.low = (low << fixed) & mask
        self.high = (((top << fixed) & mask) | ((1 << fixed) - 1)) + 1
        self.tokens.append(token_ids[index])
        self.stepper.feed(token_ids[index])
        return [(low >> (self.precision - 1 - i)) & 1 for i in range(fixed)]


def select_candidate(widths: Sequence[int], offset: int) -> int:
    """The candidate whose sub-interval [sum(widths[:i]), sum(widths[:i + 1])) holds ``offset``."""
    return int(np.searchsorted(np.cumsum(widths), offset, side="right"))


@dataclass(frozen=True)
class StegoSettings:
    """The LM distribution both sides quantize: ``top_k`` tokens (None: all), ``temperature``, ``precision`` bits."""

    top_k: int | None = DEFAULT_TOP_K
    temperature: float = DEFAULT_TEMPERATURE
    precision: int = DEFAULT_PRECISION

    def __post_init__(self) -> None:
        check_stego_settings(self.top_k, self.temperature, self.precision)


def check_stego_settings(top_k: int | None, temperature: float, precision: int) -> None:
    if top_k is not None and (not isinstance(top_k, int) or top_k < 2):  # one candidate fixes no bit: a stall
        raise ValueError(f"top_k={top_k!r} is invalid, expected None or an integer >= 2")
    if not isinstance(temperature, int | float) or not temperature > 0:
        raise ValueError(f"temperature={temperature!r} is invalid, expected a number > 0")
    if not isinstance(precision, int) or not 8 <= precision <= 62:
        raise ValueError(f"precision={precision!r} is invalid, expected an integer in [8, 62]")


def embed_tokens(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    bits: Sequence[int],
    prompt: str,
    *,
    seed: int = 0,
    settings: StegoSettings | None = None,
    max_tokens: int = MAX_STEGO_TOKENS,
) -> list[int]:
    """The stego tokens carrying ``bits`` and their checksum (module docstring); ``seed`` draws the padding bits."""
    settings = settings or StegoSettings()
    stream = check_bits(bits) + checksum_bits(check_bits(bits))
    padding = random.Random(seed)
    point = stream + [padding.getrandbits(1) for _ in range(settings.precision)]
    coder = IntervalCoder(model, tokenizer, prompt, settings)
    position = 0
    while position < len(stream):
        if len(coder.tokens) >= max_tokens:
            raise ValueError(f"{len(stream)} bits need more than max_tokens={max_tokens} stego tokens")
        token_ids, widths = coder.candidates()
        window = int("".join(map(str, point[position : position + settings.precision])), 2)
        position += len(coder.choose(select_candidate(widths, window - coder.low), token_ids, widths))
    return coder.tokens


def embed_bits(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    bits: Sequence[int],
    prompt: str,
    *,
    seed: int = 0,
    settings: StegoSettings | None = None,
) -> str:
    """Stego text continuing ``prompt`` that carries ``bits`` (arithmetic-coding steganography, module docstring)."""
    tokens = embed_tokens(model, tokenizer, bits, prompt, seed=seed, settings=settings)
    text = tokenizer.decode(tokens, clean_up_tokenization_spaces=False)
    if tokenizer(text, add_special_tokens=False)["input_ids"] != tokens:  # the window check missed a long merge
        raise ValueError(f"seed={seed}: the stego text does not retokenize to its tokens; embed with another seed")
    return text


def extract_bits(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    text: str,
    prompt: str,
    n_bits: int,
    *,
    settings: StegoSettings | None = None,
) -> list[int]:
    """The ``n_bits`` bits :func:`embed_bits` hid in ``text``; StegoCorruptionError when the text was modified."""
    if not isinstance(n_bits, int) or isinstance(n_bits, bool) or n_bits < 0:
        raise ValueError(f"n_bits={n_bits!r} is invalid, expected an integer >= 0")
    if not isinstance(text, str):
        raise ValueError(f"text must be a string, got {type(text).__name__}")
    total = n_bits + CHECKSUM_BITS
    tokens = tokenizer(text, add_special_tokens=False)["input_ids"]
    coder = IntervalCoder(model, tokenizer, prompt, settings or StegoSettings())
    bits: list[int] = []
    for step, token_id in enumerate(tokens):
        if len(bits) >= total:
            raise StegoCorruptionError(
                f"stego text corrupted: all {total} bits were fixed after {step} of its {len(tokens)} tokens "
                "(tokens were appended or changed)"
            )
        try:
            token_ids, widths = coder.candidates()
        except ValueError as error:  # no canonical candidate: the embedder cannot have reached this context
            raise StegoCorruptionError(f"stego text corrupted at token {step}: {error}") from error
        if token_id not in token_ids:
            raise StegoCorruptionError(
                f"stego text corrupted at token {step} ({tokenizer.decode([token_id])!r}): the embedder could not "
                "have generated it with this model, prompt and settings"
            )
        bits += coder.choose(token_ids.index(token_id), token_ids, widths)
    if len(bits) < total:
        raise StegoCorruptionError(
            f"stego text corrupted or truncated: its {len(tokens)} tokens fix {len(bits)} of {total} bits"
        )
    payload, checksum = bits[:n_bits], bits[n_bits:total]
    if checksum != checksum_bits(payload):
        raise StegoCorruptionError("stego text corrupted: the extracted bits fail their CRC-16 checksum")
    return payload
