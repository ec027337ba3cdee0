"""The causal-LM core: loading, the base module, prompts, scoring, anatomy, forward hooks, activation harvesting.

Submodules are imported by name (``from trustlit.llm import hooks``); this package imports nothing itself.
"""
