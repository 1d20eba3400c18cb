"""Developer benchmarks and parity checks, not front ends: lmprobe timed or checked against peer
implementations (the methods' reference code, numpy/scipy, transformers, lm-eval). Each runs as
``python -m experiments.bench.NAME`` (byod, embedding, kernels, loss_data, lm_eval, scope, synbench,
check_pypi_models)."""
