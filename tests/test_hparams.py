"""One style of hyperparameter validation: restricted types, checked from Python by check_arguments."""

from __future__ import annotations

import pytest

from trustlit.data import QADataModule, TabularDataModule
from trustlit.hparams import ClosedUnitInterval, PositiveFloat, PositiveInt, check_arguments, plain_numbers
from trustlit.unlearning import UnlearningEvaluation


class Example:
    def __init__(self, lr: PositiveFloat = 0.1, p: ClosedUnitInterval | None = None, name: str = "x") -> None:
        check_arguments(Example.__init__, locals())


class Derived(Example):
    """Inherits the constructor: errors name the class being built."""


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"lr": 0.0}, "Example: lr=0.0 is invalid, expected a number > 0"),
        ({"lr": "fast"}, "Example: lr='fast' is invalid, expected a number > 0"),
        ({"lr": True}, "Example: lr=True is invalid, expected a number > 0"),
        ({"p": 1.5}, r"Example: p=1.5 is invalid, expected a number in \[0, 1\]"),
    ],
)
def test_bad_values_name_the_class_key_value_and_range(kwargs, message):
    with pytest.raises(ValueError, match=message):
        Example(**kwargs)


def test_valid_values_none_and_unrestricted_arguments_pass():
    Example(lr=1e-9, p=None, name="")
    Example(p=0.0)
    Example(p=1)


def test_the_class_being_built_is_named():
    with pytest.raises(ValueError, match=r"^Derived: lr=-1 is invalid"):
        Derived(lr=-1)


def test_plain_numbers_turns_restricted_values_into_builtins():
    hparams = {"lr": PositiveFloat(0.5), "steps": PositiveInt(3), "name": "x"}
    plain_numbers(hparams)
    assert type(hparams["lr"]) is float and type(hparams["steps"]) is int and hparams["name"] == "x"


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: QADataModule(batch_size=0), "QADataModule: batch_size=0 is invalid, expected an integer > 0"),
        (lambda: QADataModule(max_length=-4), "QADataModule: max_length=-4 is invalid"),
        (lambda: TabularDataModule(batch_size=0), "TabularDataModule: batch_size=0 is invalid"),
        (lambda: UnlearningEvaluation(max_new_tokens=0), "UnlearningEvaluation: max_new_tokens=0 is invalid"),
    ],
)
def test_data_modules_and_evaluations_use_the_same_style(build, message):
    with pytest.raises(ValueError, match=message):
        build()
