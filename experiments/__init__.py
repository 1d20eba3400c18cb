"""A checkout's entry points, `python -m experiments.<command> --flag=value` (the front ends live in
lmprobe.cli; the wheel installs them as the `lmprobe` command), and the benchmarks in experiments.bench.
Not installed: the wheel's one import package is lmprobe."""
