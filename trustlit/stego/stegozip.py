"""StegoZip: semantic redundancy pruning and index-based compression of the secret message before LLM steganography.

Jiang, Yang, Zhang, Yu, Chen, "StegoZip: Enhancing Linguistic Steganography Payload in Practice with Large Language
Models" (NeurIPS 2025; code Jungle0430/StegoZip). With R the restorer (the LM fine-tuned with LoRA to refill pruned
words) shared by sender and receiver:

- **Self-information** of a word u = (w^(1)..w^(k)) of the message m: I(u) = sum_i -log p_R(w^(i) | w_<i) (natural
  log, as the released code); Ī(m) is the mean token self-information of m, Ī(D) that of the public data D.
- **Dynamic pruning**: alpha' = clip(alpha * (1 - eta * (Ī(m) - Ī(D)) / Ī(D)), 0, 1); the threshold tau is the
  alpha'-quantile of the finite word self-informations; words with I(u) < tau become ``[]``, named entities never
  do (I(u) := inf). Defaults alpha = 0.4, eta = 1.0 (the paper's main experiment); training pairs use eta = 0.
- **Restorer**: trained on (pruned, original with each pruned word bracketed ``[word]``) pairs built from public
  texts (:class:`trustlit.data.stego_messages.StegoMessageDataModule`), with the paper's instruction; it fills each
  ``[]``. **Self-check**: the sender runs R on the pruned message and writes every wrong fill back as ``[word]``
  (if R returns the wrong number of fills, the message is sent unpruned); the receiver runs R on the same input,
  gets the same fills (greedy decoding) and overrides them by the marked words: restoration is lossless.
- **Index-based compression** of the checked message by R's token ranks (:func:`trustlit.stego.coding.compress`),
  XOR a SHAKE-256 keystream K (the paper: ChaCha20) so that the embedded bits are uniform, then
  arithmetic-coding steganography (:func:`trustlit.stego.coding.embed_bits`) by a separate LM (the paper's
  practice: the restorer is not the stego generator).

Named entities: the released code tags them with spaCy's en_core_web_md, which cannot be installed offline here;
:func:`entity_mask` marks words with a digit and capitalised words not opening a sentence (or opening one before
another capitalised word) instead.

Notes: docs/methods/stegozip.md
"""

from __future__ import annotations

import hashlib
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from trustlit.finetune import CausalLMFineTuning
from trustlit.hparams import NonNegativeFloat, NonNegativeInt, PositiveFloat, PositiveInt, check_arguments
from trustlit.llm.loading import CausalLMSpec
from trustlit.llm.module import LRSchedule
from trustlit.llm.prompts import IGNORE_INDEX, format_qa, resolve_prompt_format, stop_token_ids
from trustlit.llm.scoring import evaluating, token_nll
from trustlit.stego.coding import (
    StegoSettings,
    bits_to_bytes,
    bytes_to_bits,
    compress,
    context_ids,
    decompress,
    embed_bits,
    extract_bits,
)

# the released code's restorer instruction (main.py --instruction)
INSTRUCTION = (
    "You are a text restoration specialist. Your task is to ONLY fill in the missing content within square brackets "
    "[] in the input text. Requirements:\n1. Strictly preserve all existing text and punctuation outside brackets.\n"
    "2. Maintain original text structure and formatting."
)
SLOT = "[]"
DEFAULT_ALPHA = 0.4
DEFAULT_ETA = 1.0
SENTENCE_END = (".", "!", "?")
BRACKETED = re.compile(r"\[([^\[\]]*)\]")
SMOLLM2_LORA = {
    "r": 16,
    "lora_alpha": 32,
    "lora_dropout": 0.05,
    "target_modules": ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
}


def normalise(message: str) -> list[str]:
    """The message's words (whitespace collapsed, as the released code's clean_text); brackets are refused."""
    if not isinstance(message, str) or not message.strip():
        raise ValueError(f"message must be a non-empty string, got {message!r}")
    if "[" in message or "]" in message:
        raise ValueError(f"message {message[:60]!r} contains '[' or ']', StegoZip's slot markers: remove them")
    return message.split()


def _strip(word: str) -> str:
    return re.sub(r"^[\W_]+|[\W_]+$", "", word)


def entity_mask(words: Sequence[str]) -> list[bool]:
    """Stand-in for spaCy NER: words with a digit, capitalised words inside a sentence, and a capitalised sentence
    opener directly followed by another capitalised word."""
    mask = []
    for i, word in enumerate(words):
        core = _strip(word)
        opens = i == 0 or words[i - 1].endswith(SENTENCE_END)
        capital = core[:1].isupper()
        # a sentence opener is a name when a capitalised word follows without punctuation between ("Jaime Vasquez")
        name_start = core == word and i + 1 < len(words) and _strip(words[i + 1])[:1].isupper()
        mask.append(any(c.isdigit() for c in core) or (capital and (not opens or name_start)))
    return mask


@torch.no_grad()
def token_self_information(
    model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, text: str, prefix: str = ""
) -> tuple[np.ndarray, list[tuple[int, int]]]:
    """-log p(w_t | prefix, w_<t) (nats) of each token of ``text`` under the LM, and each token's character span."""
    encoded = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    context = context_ids(tokenizer, prefix)
    ids = torch.tensor([context + encoded["input_ids"]], device=next(model.parameters()).device)
    labels = ids.clone()
    labels[:, : len(context)] = IGNORE_INDEX  # the prefix is conditioned on, not scored
    with evaluating(model):
        info = token_nll(model(input_ids=ids).logits, labels)[0, len(context) - 1 :]
    return info.double().cpu().numpy(), list(encoded["offset_mapping"])


def word_self_information(
    model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, words: Sequence[str]
) -> tuple[np.ndarray, float]:
    """I(u) of each word of ``" ".join(words)`` (sum over the tokens whose first non-space character is in it) and
    the mean token self-information Ī(m)."""
    text = " ".join(words)
    info, offsets = token_self_information(model, tokenizer, text)
    starts = np.cumsum([0] + [len(w) + 1 for w in words[:-1]])
    per_word = np.zeros(len(words))
    counted = np.zeros(len(words), dtype=bool)
    for value, (start, end) in zip(info, offsets, strict=True):
        piece = text[start:end]
        first = start + len(piece) - len(piece.lstrip())  # byte-level BPE tokens carry the space before a word
        index = int(np.searchsorted(starts, first, side="right")) - 1
        per_word[index] += value
        counted[index] = True
    per_word[~counted] = np.inf  # a word no token starts in carries no measurable information: keep it
    return per_word, float(info[np.isfinite(info) & (info > 0)].mean())


def adaptive_quantile(alpha: float, eta: float, mean_info: float, reference_info: float | None) -> float:
    """alpha' = clip(alpha * (1 - eta * (Ī(m) - Ī(D)) / Ī(D)), 0, 1); alpha when Ī(D) is unknown (training pairs)."""
    if not 0 <= alpha <= 1:
        raise ValueError(f"alpha={alpha!r} is invalid, expected a quantile in [0, 1]")
    if not reference_info:
        return alpha
    return float(np.clip(alpha * (1 - eta * (mean_info - reference_info) / reference_info), 0.0, 1.0))


def prune_mask(info: np.ndarray, entities: Sequence[bool], quantile: float) -> np.ndarray:
    """Which words to prune: I(u) below the ``quantile`` of the finite I(u), never a named entity."""
    finite = info[np.isfinite(info)]
    if finite.size == 0:
        return np.zeros(len(info), dtype=bool)
    threshold = np.percentile(finite, 100 * quantile)
    return (info < threshold) & ~np.asarray(entities, dtype=bool)


@dataclass
class Pruned:
    """A pruned message: its words, which were pruned, and the texts the restorer reads and writes."""

    words: list[str]
    pruned: np.ndarray
    mean_info: float
    quantile: float

    @property
    def text(self) -> str:
        """The restorer's input: pruned words as ``[]``."""
        return " ".join(SLOT if p else w for w, p in zip(self.words, self.pruned, strict=True))

    @property
    def target(self) -> str:
        """The restorer's target: the message with each pruned word bracketed."""
        return " ".join(f"[{w}]" if p else w for w, p in zip(self.words, self.pruned, strict=True))


def prune(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    message: str,
    *,
    alpha: float = DEFAULT_ALPHA,
    eta: float = DEFAULT_ETA,
    reference_info: float | None = None,
) -> Pruned:
    """Dynamic semantic redundancy pruning of ``message`` under the LM (module docstring)."""
    words = normalise(message)
    info, mean_info = word_self_information(model, tokenizer, words)
    quantile = adaptive_quantile(alpha, eta, mean_info, reference_info)
    return Pruned(words, prune_mask(info, entity_mask(words), quantile), mean_info, quantile)


def restorer_prompt(tokenizer: PreTrainedTokenizerBase, text: str, prompt_format: str = "auto") -> str:
    """The restorer's prompt for a pruned text: the paper's instruction and the text, in the QA training format."""
    question = f"{INSTRUCTION}\n\n{text}"
    return format_qa(tokenizer, question, "", resolve_prompt_format(tokenizer, prompt_format))[0]


def compression_prefix(tokenizer: PreTrainedTokenizerBase) -> str:
    """The restorer's prompt up to its input text: the context of index-based compression (ICC)."""
    marker = "\x00"
    return restorer_prompt(tokenizer, marker).split(marker)[0]


@torch.no_grad()
def restorer_fills(
    model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, text: str, max_new_tokens: int = 256
) -> list[str]:
    """The words the restorer writes into the ``[]`` slots of ``text`` (greedy), in order."""
    ids = tokenizer(restorer_prompt(tokenizer, text), add_special_tokens=False, return_tensors="pt")["input_ids"]
    with evaluating(model):
        output = model.generate(
            input_ids=ids.to(next(model.parameters()).device),
            attention_mask=torch.ones_like(ids).to(next(model.parameters()).device),
            max_new_tokens=max_new_tokens,
            do_sample=False,
            pad_token_id=tokenizer.pad_token_id,
            eos_token_id=stop_token_ids(tokenizer),
        )
    return BRACKETED.findall(tokenizer.decode(output[0, ids.shape[1] :], skip_special_tokens=True))


def self_check(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, pruned: Pruned, **kwargs: Any) -> str:
    """The message the sender codes: each slot the restorer fills wrongly carries its word as ``[word]``."""
    slots = [w for w, p in zip(pruned.words, pruned.pruned, strict=True) if p]
    if not slots:
        return " ".join(pruned.words)
    fills = restorer_fills(model, tokenizer, pruned.text, **kwargs)
    if len(fills) != len(slots):  # the restorer lost track of the slots: send the message as it is
        return " ".join(pruned.words)
    marks = iter(SLOT if fill.strip() == word else f"[{word}]" for fill, word in zip(fills, slots, strict=True))
    return " ".join(next(marks) if p else w for w, p in zip(pruned.words, pruned.pruned, strict=True))


def restore(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, checked: str, **kwargs: Any) -> str:
    """The receiver's restoration of a self-checked message: the restorer's fills, overridden by the marked words."""
    words = checked.split()
    slots = [i for i, w in enumerate(words) if BRACKETED.fullmatch(w)]
    if not slots:
        return checked
    model_input = " ".join(SLOT if i in slots else w for i, w in enumerate(words))
    fills = restorer_fills(model, tokenizer, model_input, **kwargs)
    if len(fills) != len(slots):  # the sender's self-check, with the same restorer, would have sent no slots
        raise ValueError(
            f"the restorer wrote {len(fills)} fills for {len(slots)} slots: it is not the sender's restorer"
        )
    for i, fill in zip(slots, fills, strict=True):
        marked = words[i][1:-1]
        words[i] = marked or fill.strip()
    return " ".join(words)


def keystream_bits(key: bytes, n_bits: int) -> list[int]:
    """n_bits pseudo-random bits of the SHAKE-256 stream of ``key`` (the paper's ChaCha20 pseudo-randomisation)."""
    return bytes_to_bits(hashlib.shake_256(key).digest((n_bits + 7) // 8))[:n_bits]


def xor_bits(bits: Sequence[int], key: bytes) -> list[int]:
    return [b ^ k for b, k in zip(bits, keystream_bits(key, len(bits)), strict=True)]


@dataclass
class StegoZipCodec:
    """The end-to-end StegoZip pipeline: message -> pruned -> bits -> stego text -> bits -> pruned -> restored.

    ``restorer`` (R) prunes, self-checks, rank-codes and restores; ``generator`` writes the stego text.
    ``reference_info`` is Ī(D) of the restorer's training texts (None: no adaptation). ``key`` is the shared secret
    of the keystream mask: set your own (the default is public, so it only whitens the bits). The stream has no
    per-message nonce: every message is masked by the same keystream, so two messages under one key leak their XOR.
    """

    restorer: tuple[PreTrainedModel, PreTrainedTokenizerBase]
    generator: tuple[PreTrainedModel, PreTrainedTokenizerBase]
    prompt: str
    key: bytes = b"trustlit-stegozip"
    alpha: float = DEFAULT_ALPHA
    eta: float = DEFAULT_ETA
    reference_info: float | None = None
    settings: StegoSettings = field(default_factory=StegoSettings)
    max_new_tokens: int = 256

    def mask(self, data: bytes) -> list[int]:
        """The bits of ``data`` XORed with the keystream of ``key`` (what gets embedded)."""
        return xor_bits(bytes_to_bits(data), self.key)

    def unmask(self, bits: Sequence[int]) -> bytes:
        """The bytes that :meth:`mask` turned into ``bits``."""
        return bits_to_bytes(xor_bits(bits, self.key))

    def compress(self, message: str) -> tuple[str, list[int]]:
        """The self-checked pruned message and its keystream-masked rank-code bits."""
        pruned = prune(*self.restorer, message, alpha=self.alpha, eta=self.eta, reference_info=self.reference_info)
        checked = self_check(*self.restorer, pruned, max_new_tokens=self.max_new_tokens)
        return checked, self.mask(compress(*self.restorer, checked, prefix=compression_prefix(self.restorer[1])))

    def decompress(self, bits: Sequence[int]) -> tuple[str, str]:
        """The checked pruned message and the restored message from the masked bits."""
        data = self.unmask(bits)
        checked = decompress(*self.restorer, data, prefix=compression_prefix(self.restorer[1]))
        return checked, restore(*self.restorer, checked, max_new_tokens=self.max_new_tokens)

    def send(self, message: str) -> dict[str, Any]:
        """Stego text for ``message``, with the intermediate stages and the time each took."""
        start = time.perf_counter()
        checked, bits = self.compress(message)
        compressed = time.perf_counter()
        text = embed_bits(*self.generator, bits, self.prompt, settings=self.settings)
        return {
            "checked": checked,
            "bits": bits,
            "stego_text": text,
            "compress_s": compressed - start,
            "embed_s": time.perf_counter() - compressed,
        }

    def receive(self, stego_text: str, n_bits: int) -> dict[str, Any]:
        """The restored message from a stego text carrying ``n_bits`` bits (the bit count is shared, as in Ziegler)."""
        start = time.perf_counter()
        bits = extract_bits(*self.generator, stego_text, self.prompt, n_bits, settings=self.settings)
        extracted = time.perf_counter()
        checked, restored = self.decompress(bits)
        return {
            "checked": checked,
            "restored": restored,
            "extract_s": extracted - start,
            "restore_s": time.perf_counter() - extracted,
        }


def restoration_scores(restored: Sequence[str], originals: Sequence[str]) -> dict[str, float]:
    """Exact-match rate (whitespace-normalised), mean ROUGE-L F1 and mean MiniLM cosine of restored vs original."""
    from trustlit.interpret.encoders import encode
    from trustlit.metrics.text import rouge_l_f1

    if len(restored) != len(originals) or not originals:
        raise ValueError(f"restored ({len(restored)}) and originals ({len(originals)}) must be equally long, non-empty")
    normal = [" ".join(t.split()) for t in originals]
    exact = np.mean([r == o for r, o in zip(restored, normal, strict=True)])
    rouge = np.mean([rouge_l_f1(r, o, stem=False) for r, o in zip(restored, normal, strict=True)])
    a, b = encode(list(restored)), encode(normal)
    return {"exact_match": float(exact), "rougeL_f1": float(rouge), "minilm_cosine": float(np.mean((a * b).sum(1)))}


class StegoZipRestorer(CausalLMFineTuning):
    """StegoZip's restorer R: the LM fine-tuned with LoRA on (pruned, bracketed original) pairs.

    Defaults are the released code's (``main.py``): LoRA r = 16, alpha = 32, dropout 0.05 on every projection,
    lr 3e-5, 10 % warm-up, 2 epochs (set in the recipe), answer-token NLL (the pairs' target side only). The
    restorer is SmolLM2-135M-Instruct here (the paper: Qwen2.5-7B, DeepSeek-R1-Distill-Llama-8B).
    """

    def __init__(
        self,
        lm: CausalLMSpec | None = None,
        lr: PositiveFloat = 3e-5,
        weight_decay: NonNegativeFloat = 0.0,
        warmup_steps: NonNegativeInt = 0,
        lr_schedule: LRSchedule = "linear",
        generate: bool = True,
        max_new_tokens: PositiveInt = 128,
    ) -> None:
        check_arguments(StegoZipRestorer.__init__, locals())
        lm = lm if lm is not None else CausalLMSpec(name_or_path="smollm2-135m-instruct", lora=SMOLLM2_LORA)
        super().__init__(lm, lr, weight_decay, warmup_steps, lr_schedule, generate, max_new_tokens)
