"""Throughput of forward scoring and generation, beside transformers' PyTorch model, in one run.

    python -m experiments.throughput --model=smollm2-135m [--output_dir=runs/throughput]
    lmprobe throughput --model=opt-1.3b --dtype=bfloat16 --forward=8x512,32x128 --generation=8x64x64

For each (batch per device, length) shape it prints tokens/s over all devices, achieved GFLOP/s
(an analytic count: 2 FLOPs per matmul parameter per token plus attention) and MFU: the ratio to
the accelerator's advertised dense bf16 peak times the device count (A100, H100, H200, L4, TPU
v4 / v5e / v5p / v6e, known by their device_kind). On CPU, or on an accelerator not in the
table, the peak is a square matmul measured on the same device in the same run. With torch
installed and --dtype float32, the same workload runs through transformers' PyTorch
implementation of the same weights (in float32 only), and the speed ratio is printed. Process 0
prints and writes results.json into --output_dir.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import os
import re
import time

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from lmprobe import store
from lmprobe.cli import common, flags
from lmprobe.cli.common import load_scorer, log, main_guard, output_dir, say
from lmprobe.engine import Scorer
from lmprobe.engine.batching import bucket_length
from lmprobe.errors import LmprobeError
from lmprobe.models import CAUSAL_LM
from lmprobe.text import plural

# Advertised dense (no sparsity) bf16 peak per device, TFLOP/s, by jax.devices()[0].device_kind
# ('NVIDIA H100 80GB HBM3', 'NVIDIA H100 PCIe', 'NVIDIA A100-SXM4-80GB', 'TPU v4', 'TPU v5 lite',
# 'TPU v5' or 'TPU v5p', 'TPU v6 lite', ...), matched lower-cased, first match wins.
BF16_PEAK_TFLOPS = (
    (r"\bh100\b.*\bpcie\b", 756.0),
    (r"\bh100\b.*\bnvl\b", 835.0),
    (r"\bh100\b", 989.0),  # SXM
    (r"\bh200\b", 989.0),
    (r"\ba100\b", 312.0),
    (r"\bl4\b", 121.0),  # not L40 / L40S
    (r"^tpu v4$", 275.0),  # not 'TPU v4 lite' (v4i)
    (r"^tpu v5\s*(lite|e)\b", 197.0),  # v5e
    (r"^tpu v5p?$", 459.0),
    (r"^tpu v6\s*(lite|e)\b", 918.0),  # v6e (Trillium)
)


def bf16_peak_tflops(device_kind: str) -> float | None:
    """The advertised dense bf16 peak of one device of this kind, or None when unknown."""
    kind = " ".join(device_kind.lower().split())
    return next((peak for pattern, peak in BF16_PEAK_TFLOPS if re.search(pattern, kind)), None)


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
        best = max(best, 2 * n ** 3 / best_time(lambda a=a, mm=mm: mm(a).block_until_ready(), repeats) / 1e9)
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


def peak_gflops(dtype, repeats: int) -> tuple[float, str]:
    """GFLOP/s of all devices together, and where the figure comes from."""
    device = jax.devices()[0]
    if jax.default_backend() == "cpu":  # CPU devices share the host's cores: one measurement
        return matmul_peak(dtype, repeats), "measured matmul peak (CPU)"
    per_device = bf16_peak_tflops(device.device_kind)
    if per_device is None:
        measured = matmul_peak(dtype, repeats)
        return (measured * jax.device_count(), f"measured matmul peak x {plural(jax.device_count(), 'device')} "
                f"({device.device_kind!r} is not in the table of advertised peaks)")
    return (per_device * 1e3 * jax.device_count(),
            f"advertised bf16 peak {per_device:g} TFLOP/s x {plural(jax.device_count(), 'device')}")


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


def torch_reference(name: str, **resolve_kwargs):
    """transformers' PyTorch model of the same weights in float32, or None without torch."""
    if importlib.util.find_spec("torch") is None:  # a user's install: never try to import it
        return None
    import torch
    from transformers import AutoModelForCausalLM

    from lmprobe.checkpoints.resolve import resolve

    ckpt = resolve(name, **resolve_kwargs)
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


def _shape(text: str) -> tuple[int, ...]:
    """'16x128' -> (16, 128)."""
    try:
        shape = tuple(int(x) for x in text.split("x"))
    except ValueError:
        shape = ()
    if not shape or min(shape) < 1:
        raise LmprobeError(f"shape {text!r}: write it as positive integers joined by x, such as 16x128")
    return shape


def _checked(text: str) -> str:
    _shape(text)
    return text


@dataclasses.dataclass(frozen=True)
class FrontEnd:
    model: str = "smollm2-135m"  # causal LM to time: local HF dir, hub id, alias, .gguf, embedded default
    forward: tuple[str, ...] = ("1x128", "16x128", "4x512")  # batch (per data-parallel device) x length
    # batch (per data-parallel device) x prompt x new tokens of generation
    generation: tuple[str, ...] = ("1x16x32", "8x16x32")
    repeats: int = 3  # timed calls per shape (the fastest counts), after one warm-up call
    torch: str = "auto"  # also time transformers' PyTorch model (auto: when torch is installed, float32 only)
    output_dir: str = "runs/throughput"  # where results.json goes


def build_parser():
    p = common.parser(__doc__, "throughput")
    common.front_end(p, FrontEnd, convert={"forward": _checked, "generation": _checked, "repeats": flags.bounded(1)},
                  choices={"torch": ("auto", "off")})
    return p


@main_guard
def main(argv=None):
    run = common.Run(argv)
    args = run.parse(build_parser())
    common.require_kind(args, [args.model], "throughput", (CAUSAL_LM,))
    out = output_dir(args.output_dir)
    dtype = common.dtype(args)
    rng = np.random.default_rng(args.seed)

    scorer = run.loaded(args.model, load_scorer(args))
    data = scorer.runner.data_parallel
    peak, peak_source = peak_gflops(dtype, args.repeats)
    reference = None
    if args.torch == "auto":
        if dtype == jnp.float32:
            reference = torch_reference(args.model, offline=common.offline(args), revision=args.revision,
                                        allow_pickle=args.allow_pickle)
        else:
            log.info(f"no torch reference: it runs in float32 only (this run: {jnp.dtype(dtype).name})")
    device = f"{jax.devices()[0].device_kind} x{jax.device_count()} ({jax.default_backend()})"
    say(f"{args.model} on {device}, {jnp.dtype(dtype).name}, {data} data-parallel; peak {peak:.1f} GFLOP/s "
        f"({peak_source})")
    results = {"model": args.model, "device": device, "device_kind": jax.devices()[0].device_kind,
               "devices": jax.device_count(), "data_parallel": data, "dtype": jnp.dtype(dtype).name,
               "peak_gflops": peak, "peak_source": peak_source, "forward": [], "generation": []}

    forward, generation = [_shape(s) for s in args.forward], [_shape(s) for s in args.generation]
    sections = (("forward", forward, ("length",), bench_forward, torch_forward),
                ("generation", generation, ("prompt", "new_tokens"), bench_generate, torch_generate))
    for section, shapes, names, bench, torch_bench in sections:
        rate = "tokens/s" if section == "forward" else "new tok/s"
        say(f"\n{section + ' (batch per device)':>30} {rate:>10} {'GFLOP/s':>9} {'MFU':>6} "
            f"{'torch tok/s':>12} {'ratio':>6}")
        for batch, *rest in shapes:
            if len(rest) != len(names):
                raise LmprobeError(f"--{section} shape {'x'.join(map(str, (batch, *rest)))} needs "
                                   f"{len(names) + 1} numbers: batch x {' x '.join(names)}")
            scorer.batch_size = batch
            row = {"batch_per_device": batch, "batch": batch * data, **dict(zip(names, rest)),
                   **bench(scorer, batch * data, *rest, args.repeats, rng)}
            row["mfu"] = row["gflops"] / peak
            columns = ""
            if reference is not None:
                ref = torch_bench(reference, batch * data, *rest, args.repeats, rng)["tokens_per_s"]
                row["torch_tokens_per_s"] = ref
                columns = f"{ref:>12.1f} {row['tokens_per_s'] / ref:>6.2f}"
            results[section].append(row)
            shape = f"{batch} x {rest[0]}" + "".join(f" + {r}" for r in rest[1:])
            say(f"{shape:>30} {row['tokens_per_s']:>10.1f} {row['gflops']:>9.1f} {row['mfu']:>6.1%} {columns}")

    path = store.join(out, "results.json")
    run.write(path, results)
    say(f"\nwrote {path}")
