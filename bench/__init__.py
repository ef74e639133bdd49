"""Benchmarks, each a script (python bench/NAME.py) that prints one JSON line."""
