"""Benchmarks: `python -m hpc_xla.bench <suite>`; each suite times CUDA-graph replays against peers in the
same run and reports microseconds, achieved bandwidth/FLOP rate, % of the measured ceiling and peer ratios."""
