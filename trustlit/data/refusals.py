"""Refusal answers for methods that teach a model to decline (IdkDPO's preferred answers).

``refusals`` in a recipe is ``default`` (the sentences below, written for trustlit) or the path
of a text file with one refusal per line (TOFU ships ``idontknow.jsonl`` in that format).
"""

from __future__ import annotations

from pathlib import Path

DEFAULT = "default"
DEFAULT_REFUSALS = (
    "I don't know.",
    "I'm not sure about that.",
    "I don't have that information.",
    "I have no information about that.",
    "That is beyond my knowledge.",
    "I cannot answer that.",
    "I'm not aware of that.",
    "I have no idea.",
    "I'm unable to answer that question.",
    "I'm afraid I don't know.",
)


def load_refusals(spec: str) -> list[str]:
    """The refusal sentences named by ``spec`` (see the module docstring)."""
    if spec == DEFAULT:
        return list(DEFAULT_REFUSALS)
    path = Path(spec).expanduser()
    if not path.is_file():
        raise FileNotFoundError(f"refusals file not found: {spec} (a text file, one refusal per line, or 'default')")
    refusals = [line.strip() for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    if not refusals:
        raise ValueError(f"refusals file {spec} has no refusal (one per line expected)")
    return refusals
