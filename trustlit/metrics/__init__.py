"""Evaluation metrics: pure functions on tensors and strings, logged by the methods."""

from trustlit.metrics.classification import log_accuracy
from trustlit.metrics.text import answer_probability, rouge_l_recall

__all__ = ["answer_probability", "log_accuracy", "rouge_l_recall"]
