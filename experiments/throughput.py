"""Throughput of forward scoring and generation, beside transformers' PyTorch model, in one run.

    python -m experiments.throughput --model=smollm2-135m [--json=throughput.json]

For each (batch, length) shape it prints tokens/s, achieved GFLOP/s (an analytic count: 2 FLOPs
per matmul parameter per token plus attention) and MFU: the ratio to a matmul peak measured on the same device in the same
run. With torch installed, the same workload runs through transformers' PyTorch implementation
of the same weights, and the speed ratio is printed.
"""

from __future__ import annotations

import json
import os
import time

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from experiments.cli import DTYPES, load_scorer, main_guard, parser
from lmprobe.engine import Scorer
from lmprobe.engine.batching import bucket_length


def best_time(fn, repeats: int) -> float:
    """Fastest of ``repeats`` timed calls after one warm-up (compilation) call."""
    fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def matmul_peak(dtype, repeats: int) -> float:
    """Best GFLOP/s of a square matmul on the default device."""
    best = 0.0
    for n in (1024, 2048, 4096) if jax.default_backend() != "cpu" else (512, 1024, 2048):
        a = jnp.ones((n, n), dtype)
        mm = jax.jit(lambda x: x @ x)
        best = max(best, 2 * n ** 3 / best_time(lambda: mm(a).block_until_ready(), repeats) / 1e9)
    return best


def flops_per_token(scorer: Scorer, context: int) -> float:
    """Analytic FLOPs per token of a forward pass with the LM head, at ``context`` tokens.

    2 x (matmul parameters: every kernel, plus vocab x width for the LM head, tied or not)
    + 4 x layers x context x attention width (QK^T and PV over the full, masked, context).
    XLA's cost analysis cannot be used: it counts a scan or while_loop body once.
    """
    cfg = scorer.config
    body = sum(int(np.prod(v.shape)) for path, v in nnx.to_flat_state(nnx.state(scorer.model, nnx.Param))
               if path[-1] == "kernel" and v.shape[-1] != cfg.vocab_size)
    head = cfg.vocab_size * scorer.model.embed(jnp.zeros((1, 1), jnp.int32)).shape[-1]
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    attention = 4 * cfg.num_hidden_layers * context * cfg.num_attention_heads * head_dim
    return 2 * (body + head) + attention


def bench_forward(scorer: Scorer, batch: int, length: int, repeats: int, rng) -> dict:
    seqs = rng.integers(10, scorer.vocab_size, size=(batch, length)).tolist()
    seconds = best_time(lambda: scorer.score(seqs), repeats)
    tokens_per_s = batch * length / seconds
    return {"tokens_per_s": tokens_per_s, "gflops": tokens_per_s * flops_per_token(scorer, length) / 1e9}


def bench_generate(scorer: Scorer, batch: int, prompt: int, new: int, repeats: int, rng) -> dict:
    """New tokens/s; each new token costs a forward pass over the cache (prompt + new slots)."""
    seqs = rng.integers(10, scorer.vocab_size, size=(batch, prompt)).tolist()
    seconds = best_time(lambda: scorer.generate(seqs, max_new_tokens=new, eos_id=-1, decode=False), repeats)
    tokens_per_s = batch * new / seconds
    return {"tokens_per_s": tokens_per_s,
            "gflops": tokens_per_s * flops_per_token(scorer, bucket_length(prompt) + new) / 1e9}


def torch_reference(name: str):
    """transformers' PyTorch model of the same weights, or None without torch."""
    try:
        import torch
        from transformers import AutoModelForCausalLM
    except ImportError:
        return None
    from lmprobe.checkpoints.resolve import resolve

    ckpt = resolve(name)
    if ckpt.location.endswith(".gguf"):
        model = AutoModelForCausalLM.from_pretrained(os.path.dirname(ckpt.location),
                                                     gguf_file=os.path.basename(ckpt.location))
    else:
        model = AutoModelForCausalLM.from_pretrained(ckpt.location)
    return model.eval().to(torch.float32)


def torch_forward(model, batch, length, repeats, rng) -> dict:
    import torch

    ids = torch.as_tensor(rng.integers(10, model.config.vocab_size, size=(batch, length)))

    def run():
        with torch.inference_mode():
            logp = torch.log_softmax(model(ids).logits[:, :-1].float(), dim=-1)
            return logp.gather(-1, ids[:, 1:, None])

    return {"tokens_per_s": batch * length / best_time(run, repeats)}


def torch_generate(model, batch, prompt, new, repeats, rng) -> dict:
    import torch

    ids = torch.as_tensor(rng.integers(10, model.config.vocab_size, size=(batch, prompt)))

    def run():
        with torch.inference_mode():
            model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=new,
                           min_new_tokens=new, do_sample=False, pad_token_id=0)

    return {"tokens_per_s": batch * new / best_time(run, repeats)}


def _shapes(text: str) -> list[tuple[int, ...]]:
    return [tuple(int(x) for x in s.split("x")) for s in text.split(",") if s]


@main_guard
def main(argv=None):
    p = parser(__doc__)
    p.add_argument("--forward", default="1x128,16x128,4x512", help="batch x length shapes for scoring")
    p.add_argument("--generation", default="1x16x32,8x16x32", help="batch x prompt x new-token shapes")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--torch", default="auto", choices=["auto", "off"],
                   help="also time transformers' PyTorch model (auto: when torch is installed)")
    p.add_argument("--json", default="throughput.json", help="where to write the figures")
    args = p.parse_args(argv)
    dtype = DTYPES[args.dtype]
    rng = np.random.default_rng(args.seed)

    scorer = load_scorer(args)
    peak = matmul_peak(dtype, args.repeats)
    reference = torch_reference(args.model) if args.torch == "auto" and dtype == jnp.float32 else None
    device = f"{jax.devices()[0].device_kind} x{jax.device_count()} ({jax.default_backend()})"
    print(f"{args.model} on {device}, {args.dtype}; measured matmul peak {peak:.1f} GFLOP/s")
    results = {"model": args.model, "device": device, "dtype": args.dtype, "matmul_peak_gflops": peak,
               "forward": [], "generation": []}

    print(f"\n{'forward':>16} {'tokens/s':>10} {'GFLOP/s':>9} {'MFU':>6} {'torch tok/s':>12} {'ratio':>6}")
    for batch, length in _shapes(args.forward):
        scorer.batch_size = batch
        row = {"batch": batch, "length": length, **bench_forward(scorer, batch, length, args.repeats, rng)}
        row["mfu"] = row["gflops"] / peak
        if reference is not None:
            row["torch_tokens_per_s"] = torch_forward(reference, batch, length, args.repeats, rng)["tokens_per_s"]
        results["forward"].append(row)
        torch_cols = (f"{row['torch_tokens_per_s']:>12.0f} {row['tokens_per_s'] / row['torch_tokens_per_s']:>6.2f}"
                      if reference is not None else "")
        print(f"{batch:>7} x {length:<6} {row['tokens_per_s']:>10.0f} {row['gflops']:>9.1f} "
              f"{row['mfu']:>6.1%} {torch_cols}")

    print(f"\n{'generation':>20} {'new tok/s':>10} {'GFLOP/s':>9} {'MFU':>6} {'torch tok/s':>12} {'ratio':>6}")
    for batch, prompt, new in _shapes(args.generation):
        scorer.batch_size = batch
        row = {"batch": batch, "prompt": prompt, "new_tokens": new,
               **bench_generate(scorer, batch, prompt, new, args.repeats, rng)}
        row["mfu"] = row["gflops"] / peak
        if reference is not None:
            row["torch_tokens_per_s"] = torch_generate(reference, batch, prompt, new, args.repeats, rng)["tokens_per_s"]
        results["generation"].append(row)
        torch_cols = (f"{row['torch_tokens_per_s']:>12.1f} {row['tokens_per_s'] / row['torch_tokens_per_s']:>6.2f}"
                      if reference is not None else "")
        print(f"{batch:>5} x {prompt:>4} + {new:<5} {row['tokens_per_s']:>10.1f} {row['gflops']:>9.1f} "
              f"{row['mfu']:>6.1%} {torch_cols}")

    with open(args.json, "w") as f:
        json.dump(results, f, indent=2)
    print(f"\nwrote {args.json}")


if __name__ == "__main__":
    main()
