"""Prompts and label masking for QA pairs: the one encoding every LLM method and evaluation uses.

A QA pair (x, y) is encoded as the prompt tokens of x followed by the answer tokens of y.
The prompt and the answer are tokenized separately and concatenated, so the boundary is
exact: ``labels`` copies the answer tokens and holds ``IGNORE_INDEX`` on every prompt and
padding position, and nothing but answer tokens ever reaches a loss.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

import torch
from transformers import PreTrainedTokenizerBase

IGNORE_INDEX = -100
PromptFormat = Literal["auto", "chat", "plain"]
CHAT_END_OF_TURN = "<|im_end|>"


def resolve_prompt_format(tokenizer: PreTrainedTokenizerBase, prompt_format: PromptFormat) -> str:
    """``auto`` means ``chat`` when the tokenizer has a chat template, else ``plain``."""
    if prompt_format not in ("auto", "chat", "plain"):
        raise ValueError(f"prompt_format must be 'auto', 'chat' or 'plain', got '{prompt_format}'")
    if prompt_format == "auto":
        return "chat" if tokenizer.chat_template else "plain"
    if prompt_format == "chat" and not tokenizer.chat_template:
        raise ValueError("prompt_format='chat' but the tokenizer has no chat template: use 'plain'")
    return prompt_format


def format_qa(tokenizer: PreTrainedTokenizerBase, question: str, answer: str, prompt_format: str) -> tuple[str, str]:
    """The prompt text and the answer text (with its end-of-answer marker) of one QA pair.

    ``chat``: the user turn through the tokenizer's chat template, then the answer closed by
    the end of the assistant turn. ``plain``: ``Question: {q}\\nAnswer:`` then `` {a}`` and EOS.
    """
    if prompt_format == "chat":
        prompt = tokenizer.apply_chat_template(
            [{"role": "user", "content": question}], add_generation_prompt=True, tokenize=False
        )
        end = CHAT_END_OF_TURN if end_of_turn_id(tokenizer) is not None else tokenizer.eos_token
        return prompt, answer + end
    return f"Question: {question}\nAnswer:", f" {answer}{tokenizer.eos_token}"


def encode_qa(
    tokenizer: PreTrainedTokenizerBase,
    question: str,
    answer: str,
    prompt_format: str = "plain",
    max_length: int = 256,
) -> dict[str, list[int]]:
    """Token ids of one QA pair: ``input_ids``, ``labels`` (prompt masked) and ``prompt_ids``.

    The answer is cut to fit ``max_length``; a prompt that alone fills it is an error, since
    the sample would carry no answer token.
    """
    prompt_text, answer_text = format_qa(tokenizer, question, answer, prompt_format)
    prompt_ids = tokenizer(prompt_text, add_special_tokens=prompt_format == "plain")["input_ids"]
    answer_ids = tokenizer(answer_text, add_special_tokens=False)["input_ids"]
    if len(prompt_ids) >= max_length:
        raise ValueError(
            f"the prompt has {len(prompt_ids)} tokens, max_length is {max_length}: raise "
            f"max_length or shorten the question {question[:60]!r}"
        )
    answer_ids = answer_ids[: max_length - len(prompt_ids)]
    return {
        "input_ids": prompt_ids + answer_ids,
        "labels": [IGNORE_INDEX] * len(prompt_ids) + answer_ids,
        "prompt_ids": prompt_ids,
    }


def _pad(rows: Sequence[Sequence[int]], value: int, left: bool = False) -> torch.Tensor:
    width = max(len(r) for r in rows)
    padded = [([value] * (width - len(r)) + list(r)) if left else (list(r) + [value] * (width - len(r))) for r in rows]
    return torch.tensor(padded, dtype=torch.long)


def collate_qa(samples: Sequence[dict[str, Any]], pad_token_id: int) -> dict[str, Any]:
    """Pad encoded samples into a batch.

    Training tensors are right-padded (``input_ids``, ``attention_mask``, ``labels``); the
    prompts are left-padded (``prompt_input_ids``, ``prompt_attention_mask``) so that greedy
    generation continues every prompt from the same position. ``index`` keeps each sample's
    position in its dataset; ``answer`` and ``question`` keep the texts for evaluation.
    """
    input_ids = [s["input_ids"] for s in samples]
    prompt_ids = [s["prompt_ids"] for s in samples]
    batch = {
        "input_ids": _pad(input_ids, pad_token_id),
        "attention_mask": _pad([[1] * len(r) for r in input_ids], 0),
        "labels": _pad([s["labels"] for s in samples], IGNORE_INDEX),
        "prompt_input_ids": _pad(prompt_ids, pad_token_id, left=True),
        "prompt_attention_mask": _pad([[1] * len(r) for r in prompt_ids], 0, left=True),
        "index": torch.tensor([s["index"] for s in samples], dtype=torch.long),
    }
    for key in ("question", "answer"):
        if key in samples[0]:
            batch[key] = [s[key] for s in samples]
    return batch


def end_of_turn_id(tokenizer: PreTrainedTokenizerBase) -> int | None:
    """The id of ``<|im_end|>`` when the tokenizer has it as a token (ChatML models)."""
    token_id = tokenizer.convert_tokens_to_ids(CHAT_END_OF_TURN)
    return None if token_id is None or token_id == tokenizer.unk_token_id else token_id


def stop_token_ids(tokenizer: PreTrainedTokenizerBase) -> list[int]:
    """Tokens that end an answer: EOS and, for chat tokenizers, the end of a turn."""
    ids = [tokenizer.eos_token_id]
    end_of_turn = end_of_turn_id(tokenizer)
    if end_of_turn is not None and end_of_turn not in ids:
        ids.append(end_of_turn)
    return ids
