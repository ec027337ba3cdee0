"""Errors that speak to the user: one line naming the key, the value, the file and what is valid.

:func:`trustlit.cli.main` prints ``trustlit: error: <one line>`` for the errors here and for the
ValueError/OSError/KeyError... that data modules, models and jsonargparse raise; ``--debug`` or
``TRUSTLIT_DEBUG=1`` shows the full traceback instead. Imports nothing heavy: ``trustlit --help``
goes through here.
"""

from __future__ import annotations

import argparse
import difflib
import importlib
import inspect
import re
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from trustlit.paths import read_utf8

MAX_LINE = 400


class ConfigError(ValueError):
    """A recipe or command-line value that the parser refuses (exit status 2, like argparse)."""


class CheckpointError(ValueError):
    """A checkpoint that is missing, unreadable, or written by another model class."""


class RunLockedError(RuntimeError):
    """Another live run writes checkpoints into the same directory."""


def _raised_in_trustlit(error: BaseException) -> bool:
    tb = error.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    return tb is not None and "trustlit" in Path(tb.tb_frame.f_code.co_filename).parts


def _message(error: BaseException) -> str:
    return error.args[0] if isinstance(error, KeyError) and error.args else str(error)


def root_message(error: BaseException) -> str:
    """The most specific message of a chain: a wrapper (jsonargparse re-raising a class's error with its
    message inside) gives way to its cause; an error trustlit raised speaks for itself."""
    current = error
    while (
        not _raised_in_trustlit(current)
        and current.__cause__ is not None
        and _message(current.__cause__) in _message(current)
    ):
        current = current.__cause__
    return _message(current)


def one_line(text: str) -> str:
    line = " ".join(part.strip() for part in str(text).splitlines() if part.strip())
    return line if len(line) <= MAX_LINE else line[: MAX_LINE - 3] + "..."


# ---------------------------------------------------------------------------------------- parse errors


def _yaml_keys(node: Any, prefix: str = "") -> Iterator[str]:
    if isinstance(node, dict):
        for key, value in node.items():
            path = f"{prefix}{key}"
            yield path
            yield from _yaml_keys(value, f"{path}.")
    elif isinstance(node, list):
        for index, value in enumerate(node):
            yield from _yaml_keys(value, f"{prefix}{index}.")


def locate_key(name: str, configs: Iterable[Path], under: str = "") -> tuple[Path, str] | None:
    """The first config file, and the dotted key in it under ``under``, whose last part is ``name``."""
    import yaml

    for config in configs:
        try:
            data = yaml.safe_load(read_utf8(config))
        except (OSError, ValueError, yaml.YAMLError):
            continue
        for key in _yaml_keys(data):
            if key.rsplit(".", 1)[-1] == name and key.startswith(under):
                return config, key
    return None


def _init_parameters(class_path: str) -> list[str]:
    """The ``__init__`` arguments a class accepts, following ``**kwargs`` into its bases."""
    module, _, name = class_path.rpartition(".")
    try:
        cls = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError, ValueError):
        return []
    names: list[str] = []
    for base in inspect.getmro(cls):
        if "__init__" not in vars(base):
            continue
        parameters = list(inspect.signature(base.__init__).parameters.values())[1:]
        names += [p.name for p in parameters if p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)]
        if not any(p.kind is p.VAR_KEYWORD for p in parameters):
            break
    return list(dict.fromkeys(names))


def _unknown_option(message: str, key: str, configs: list[Path]) -> str | None:
    found = re.search(r"(?:Option|Key) ['\"]([^'\"]+)['\"] is not (?:accepted|expected)", message)
    if not found:
        return None
    name = found.group(1)
    class_path = re.search(r"given class_path '([^']+)'", message)
    valid = _init_parameters(class_path.group(1)) if class_path else []
    close = difflib.get_close_matches(name, valid, n=1)
    hint = f"; did you mean '{close[0]}'?" if close else (f"; valid: {', '.join(valid)}" if valid else "")
    where = locate_key(name, configs, under=key)
    if where:
        return f"unknown key '{where[1]}' in {where[0]}{hint}"
    return f"unknown key '{name}' under '{key}' (given on the command line){hint}"


def _nested_key(message: str, key: str) -> str:
    """``model.init_args.lr`` for an error that jsonargparse reports under ``model`` about a class's ``lr``."""
    inner = re.findall(r'Parser key "([^"]+)"', message)[1:]
    return ".init_args.".join([key, *inner]) if inner and "class_path" in message else key


NOT_A_REASON = r"\s*-?\s*(Expected a|Given value|Subtypes|Errors:|Does not validate|Problem with|Parser key)"


def _type_name(text: str) -> str:
    """``int`` or ``one of 'a', 'b'`` from jsonargparse's ``<class 'int'>`` or ``typing.Literal['a', 'b']``."""
    text = re.sub(r"\. Got value: .*$", "", text)
    literal = re.match(r"typing\.Literal\[(.*)\]$", text)
    if literal:
        return f"one of {literal.group(1)}"
    return text.removeprefix("<class '").removesuffix("'>").rsplit(".", 1)[-1]


def _bad_value(message: str, key: str) -> str:
    nested = len(re.findall(r'Parser key "', message)) > 1
    expected = [_type_name(m.group(1)) for m in re.finditer(r"Expected a (.+)$", message, re.M)]
    if nested:  # the outer union's `None` alternative is not what the inner key accepts
        expected = [name for name in expected if name != "NoneType"]
    given = re.search(r"NestedArg\(key='[^']*', val='([^']*)'\)", message) or re.search(
        r"Given value: (.*)$", message, re.M
    )
    restricted = re.search(r"Not of type (\w+): .* does not conform to restriction", message)
    reasons = [
        line.strip(" -") for line in message.splitlines()[1:] if line.strip(" -") and not re.match(NOT_A_REASON, line)
    ]
    from trustlit.hparams import RESTRICTION_DESCRIPTIONS  # jsonargparse: not for the light commands

    key = _nested_key(message, key)
    value = f"={given.group(1)}" if given and len(given.group(1)) <= 80 else ""
    if restricted and restricted.group(1) in RESTRICTION_DESCRIPTIONS:
        return f"{key}{value}: expected {RESTRICTION_DESCRIPTIONS[restricted.group(1)]} ({restricted.group(1)})"
    if expected and not reasons:
        return f"{key}{value}: expected {' or '.join(dict.fromkeys(expected)).replace('NoneType', 'None')}"
    return f"{key}{value}: {reasons[-1] if reasons else one_line(message)}"


def describe_parse_error(error: argparse.ArgumentError, configs: list[Path]) -> str:
    """One line for jsonargparse's multi-line parse error: the key, the value or file, what is valid."""
    message = str(error.message if error.message is not None else error)
    header = re.match(r'Parser key "([^"]+)":', message)
    if not header:
        if message.startswith("unrecognized arguments:"):
            given = [a for a in message.removeprefix("unrecognized arguments:").split() if a.startswith("-")]
            return f"unknown option{'s' if len(given) > 1 else ''} {' '.join(given)} (`trustlit COMMAND --help`)"
        return one_line(message)
    key = header.group(1)
    return _unknown_option(message, key, configs) or _bad_value(message, key)
