"""StegoZip section of ``benchmarks/stego.py`` (``docs/benchmarks/stego.md``).

- ``stegozip``: payload of arithmetic-coding steganography (Ziegler et al. 2019; top-300, temperature 0.9, 26-bit
  intervals; :mod:`trustlit.stego.coding`) on SmolLM2-135M-Instruct, for four ways to turn a held-out secret
  message into bits: raw UTF-8, zlib (level 9), the base LM's rank coding alone (:func:`~trustlit.stego.coding.
  compress`), and full StegoZip (:class:`~trustlit.stego.stegozip.StegoZipCodec`: pruning alpha = 0.4, eta = 1,
  self-check, rank coding by the fine-tuned restorer). Every bit string is masked by the same keystream and
  embedded by the same stego LM (the base model) after the same prompt. Payload = secret-message UTF-8 bits per
  stego token; stego tokens per message; times; restoration quality (exact match, ROUGE-L F1, MiniLM cosine) of
  the restored and of the pruned (compressed) message, as the paper's Table 2 reports both. Target (issue #15):
  StegoZip >= 2x the raw-bits payload (paper: 2.5x on 7B models).

Messages: TOFU answers and fictitious-facts sentences from authors the restorer never saw
(:mod:`trustlit.data.stego_messages`). The restorer: SmolLM2 with LoRA (r 16, alpha 32, all projections) fine-tuned
on the training authors' pairs for ``--stegozip-steps`` steps of batch 4 at lr 3e-4 (the paper: 2 epochs on 30,000
texts at lr 3e-5). A LoRA step of SmolLM2 on 4 pairs costs about 20 CPU-seconds and the stego coders run it one
token at a time, so the default run is small (4 messages, 80 training pairs, 10 steps: a barely trained restorer,
whose wrong fills the self-check corrects); ``--stegozip-messages 50 --stegozip-train 1000 --stegozip-steps 500``
is a meaningful scale for a GPU or a long CPU run.

Stages cached under ``<workdir>/stegozip[_quick]/``: the restorer's LoRA weights and Ī(D), then one JSON per message
(keyed by its index), so a rerun resumes and a larger ``--stegozip-messages`` only adds messages. Extraction is
checked for the rank-coded and StegoZip bit strings (the bit path of the pipeline); raw UTF-8 and zlib strings are
only embedded unless ``--stegozip-verify-all`` (their stego texts are 3-6x longer and SmolLM2 runs at ~0.3 s a
token on this shared CPU). ``--quick``: tiny LMs from config, 2 messages, a 4-step restorer (a smoke run).
"""

from __future__ import annotations

import argparse
import functools
import statistics
import time
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from benchmarks.common import bare_trainer, cached_json, mean_std, table

CODINGS = ("raw UTF-8", "zlib", "rank coding", "StegoZip")
STEGO_PROMPTS = (
    "Write a short story about a lighthouse keeper.",
    "Describe a walk through an old city market.",
    "Tell me about your favourite season and why.",
    "Write a letter to a friend about a recent trip.",
)
TINY = {"name_or_path": "tiny-llama", "tiny": {"hidden_size": 32, "num_layers": 1, "num_heads": 2}}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("stegozip")
    group.add_argument("--stegozip-messages", type=int, default=4, help="held-out messages, half TOFU (paper 1,900)")
    group.add_argument("--stegozip-train", type=int, default=40, help="training messages per source")
    group.add_argument("--stegozip-steps", type=int, default=10, help="restorer fine-tuning steps (batch 4)")
    group.add_argument("--stegozip-verify-all", action="store_true", help="also extract the raw and zlib stego texts")
    group.add_argument("--stegozip-tofu", default="../shared/data/tofu", help="TOFU directory (full.json)")


def sizes(args: argparse.Namespace) -> dict[str, Any]:
    if args.quick:
        return {"messages": 2, "train": 6, "steps": 4, "lm": TINY, "verify_all": True}
    return {"messages": args.stegozip_messages, "train": args.stegozip_train, "steps": args.stegozip_steps,
            "lm": {"name_or_path": "smollm2-135m-instruct"}, "verify_all": args.stegozip_verify_all}  # fmt: skip


def train_restorer(size: dict[str, Any], sources: list[str], directory: Path) -> tuple[Any, float]:
    """The fine-tuned restorer (LoRA weights cached) and Ī(D) of its training messages."""
    from trustlit.data.stego_messages import StegoMessageDataModule
    from trustlit.paths import atomic_path
    from trustlit.stego.stegozip import SMOLLM2_LORA, StegoZipRestorer

    weights = directory / "restorer_lora.pt"
    module = StegoZipRestorer(
        lm={**size["lm"], "lora": SMOLLM2_LORA}, lr=3e-4, warmup_steps=max(1, size["steps"] // 10)
    )
    data = StegoMessageDataModule(
        sources=sources, eval_splits=[], max_messages=size["train"], batch_size=4, max_length=512
    )

    def fit() -> dict[str, Any]:
        began = time.perf_counter()
        bare_trainer(max_steps=size["steps"]).fit(module, datamodule=data)
        trainable = {n: p.detach().clone() for n, p in module.model.named_parameters() if p.requires_grad}
        with atomic_path(weights) as temporary:
            torch.save(trainable, temporary)
        return {
            "reference_info": data.reference_info,
            "train_s": time.perf_counter() - began,
            "pairs": len(data.train_dataset),
        }

    info = cached_json(directory / "restorer.json", fit)
    module.model.load_state_dict(torch.load(weights), strict=False)
    return module, info


def message_bits(coding: str, message: str, base: tuple, codec: Any) -> tuple[list[int], dict[str, Any]]:
    """The keystream-masked bits of ``message`` under ``coding``, and what the coding reports."""
    from trustlit.stego.coding import compress

    began = time.perf_counter()
    if coding == "raw UTF-8":
        data = message.encode()
    elif coding == "zlib":
        data = zlib.compress(message.encode(), 9)
    elif coding == "rank coding":
        data = compress(*base, message)
    else:
        checked, bits = codec.compress(message)
        return bits, {"checked": checked, "compress_s": time.perf_counter() - began}
    return codec.mask(data), {"compress_s": time.perf_counter() - began}


def decode_bits(coding: str, bits: list[int], base: tuple, codec: Any) -> dict[str, Any]:
    """Undo :func:`message_bits` (after extraction)."""
    from trustlit.stego.coding import decompress

    began = time.perf_counter()
    if coding == "StegoZip":
        _, restored = codec.decompress(bits)
        return {"restored": restored, "decode_s": time.perf_counter() - began}
    data = codec.unmask(bits)
    text = {"raw UTF-8": lambda: data.decode(), "zlib": lambda: zlib.decompress(data).decode(),
            "rank coding": lambda: decompress(*base, data)}[coding]()  # fmt: skip
    return {"restored": text, "decode_s": time.perf_counter() - began}


def run_message(message: str, prompt: str, base: tuple, codec: Any, verify_all: bool) -> dict[str, Any]:
    from trustlit.stego.coding import StegoCorruptionError, embed_tokens, extract_bits

    rows = {}
    for coding in CODINGS:
        bits, row = message_bits(coding, message, base, codec)
        began = time.perf_counter()
        tokens = embed_tokens(*base, bits, prompt, settings=codec.settings)
        row.update(bits=len(bits), stego_tokens=len(tokens), embed_s=time.perf_counter() - began)
        text = base[1].decode(tokens, clean_up_tokenization_spaces=False)
        rows[coding] = row
        if verify_all or coding in ("rank coding", "StegoZip"):
            began = time.perf_counter()
            try:
                extracted = extract_bits(*base, text, prompt, len(bits), settings=codec.settings)
            except StegoCorruptionError as error:  # e.g. the text retokenizes otherwise: a failure to report
                row.update(bits_lossless=False, error=str(error))
                continue
            row.update(bits_lossless=extracted == bits, extract_s=time.perf_counter() - began)
            row.update(decode_bits(coding, extracted, base, codec))
    return {"message": message, "utf8_bits": 8 * len(message.encode()), "codings": rows}


def stegozip(args: argparse.Namespace) -> str:
    from trustlit.data.stego_messages import split_messages
    from trustlit.llm.loading import load_causal_lm
    from trustlit.stego.stegozip import StegoZipCodec

    size = sizes(args)
    directory = args.workdir / ("stegozip_quick" if args.quick else "stegozip")
    sources = ["fictitious", str(Path(args.stegozip_tofu).expanduser().resolve())]
    restorer, info = train_restorer(size, sources, directory)
    restorer.model.eval()
    base = load_causal_lm(**size["lm"])
    base[0].eval()
    half = (size["messages"] + 1) // 2
    per_source = [split_messages([source], "test", 0.2, 0, half) for source in sources]
    messages = [" ".join(m.split()) for pair in zip(*per_source, strict=False) for m in pair][: size["messages"]]
    results = []
    for index, message in enumerate(messages):
        tokenizer = base[1]
        prompt = tokenizer.apply_chat_template([{"role": "user", "content": STEGO_PROMPTS[index % 4]}],
                                               add_generation_prompt=True, tokenize=False)  # fmt: skip
        codec = StegoZipCodec(
            (restorer.model, restorer.tokenizer),
            base,
            prompt,
            reference_info=info["reference_info"],
            max_new_tokens=128,
        )
        compute = functools.partial(run_message, message, prompt, base, codec, size["verify_all"])
        results.append(cached_json(directory / f"message_{index}.json", compute))
    return report(results, info, size)


def report(results: list[dict[str, Any]], info: dict[str, Any], size: dict[str, Any]) -> str:
    from trustlit.stego.stegozip import restoration_scores

    raw_tokens = [r["codings"]["raw UTF-8"]["stego_tokens"] for r in results]
    rows = []
    for coding in CODINGS:
        per = [r["codings"][coding] for r in results]
        payload = [r["utf8_bits"] / c["stego_tokens"] for r, c in zip(results, per, strict=True)]
        ratio = [raw / c["stego_tokens"] for raw, c in zip(raw_tokens, per, strict=True)]
        checked = [c["bits_lossless"] for c in per if "bits_lossless" in c]
        lossless = f"{sum(checked)}/{len(checked)}" if checked else "not extracted"
        rows.append([coding, mean_std([c["bits"] for c in per], 0), mean_std([c["stego_tokens"] for c in per], 1),
                     mean_std(payload, 2), f"{statistics.median(ratio):.2f}x", lossless,
                     mean_std([c["compress_s"] + c["embed_s"] for c in per], 1),
                     mean_std([c["extract_s"] + c["decode_s"] for c in per if "extract_s" in c], 1)])  # fmt: skip
    header = ["message coding", "bits", "stego tokens", "payload (bits/token)", "median x raw", "bit path lossless",
              "encode s", "decode s"]  # fmt: skip
    originals = [r["message"] for r in results]
    restored = [r["codings"]["StegoZip"].get("restored", "") for r in results]
    pruned = [r["codings"]["StegoZip"]["checked"] for r in results]
    compressed = [" ".join(w.strip("[]") for w in p.split() if w != "[]") for p in pruned]
    quality = [["restored (receiver)", *fmt(restoration_scores(restored, originals))],
               ["compressed (slots dropped)", *fmt(restoration_scores(compressed, originals))]]  # fmt: skip
    kept = [len(p.split()) for p in pruned]
    marked = [sum(w.startswith("[") and w != "[]" for w in p.split()) for p in pruned]
    slots = [p.count("[]") for p in pruned]
    examples = "\n".join(f"- `{r['message']}` -> `{r['codings']['StegoZip']['checked']}`" for r in results[:3])
    return f"""## StegoZip payload on SmolLM2-135M-Instruct

{len(results)} held-out messages (TOFU answers and fictitious-facts sentences of authors the restorer never saw),
{info["pairs"]} restoration pairs, {size["steps"]} LoRA steps ({info["train_s"]:.0f} s);
Ī(D) = {info["reference_info"]:.2f} nats.
Payload: the message's UTF-8 bits per stego token (higher is better); "median x raw": stego tokens of raw UTF-8
over stego tokens of the coding, per message. Times in seconds per message (encode: coding + embedding; decode:
extraction + decoding/restoration).

{table(header, rows, "lrrrrrrr")}

Restoration quality (the paper's Table 2 reports the restored and the compressed message):

{table(["StegoZip message", "exact match", "ROUGE-L F1", "MiniLM cosine"], quality, "lrrr")}

Pruning after self-check: {mean_std(slots, 1)} slots left to the restorer, {mean_std(marked, 1)} marked corrections,
of {mean_std(kept, 1)} words a message. Examples:

{examples}
"""


def fmt(scores: dict[str, float]) -> list[str]:
    return [f"{scores['exact_match']:.2f}", f"{scores['rougeL_f1']:.3f}", f"{scores['minilm_cosine']:.3f}"]


SECTIONS: dict[str, Callable[[argparse.Namespace], str]] = {"stegozip": stegozip}
