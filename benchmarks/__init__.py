"""fastlaunch launch-overhead benchmarks (pytest-benchmark); see ``benchmarks/run.py``."""
