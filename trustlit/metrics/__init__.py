"""Evaluation metrics: pure functions on tensors and strings, logged by the methods."""

from trustlit.metrics.text import answer_probability, rouge_l_recall

__all__ = ["answer_probability", "rouge_l_recall"]
