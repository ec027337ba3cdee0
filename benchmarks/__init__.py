"""Benchmark scripts (not tests).

A regular package, not a namespace one: opacus installs a top-level ``benchmarks`` package,
which would otherwise shadow this directory when a recipe names ``benchmarks.overhead.StepTimer``.
"""
