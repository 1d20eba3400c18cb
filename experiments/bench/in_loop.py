"""The in-loop callback's cost per call against one training step of the same model, side by side,
and its compilations after the first and the last call.

    python -m experiments.bench.in_loop [--hidden=128 --layers=4 --train_batch=16 --seq=128 --calls=4
                                         --every=3 --methods=... --examples=32 --batch_size=16]

A Llama of a few M parameters with SmolLM2's tokenizer (49152 ids, tied embeddings, so the LM head
is most of the model, as in a small real run) trains with optax AdamW on fortunes blocks of
train_batch x seq tokens. Every ``every`` steps the callback (lmprobe.integrations.in_loop) scores
it. Each training step is timed to completion (block_until_ready); the first, which compiles, is
reported apart. The callback's first call compiles its programs; later calls reuse them, and the
compilation count must not move (checked and printed).
"""

from __future__ import annotations

import tempfile
import time

import jax
import numpy as np
import optax
from flax import nnx

from lmprobe.checkpoints.resolve import resolve
from lmprobe.cli.common import main_guard, parse, parser, say
from lmprobe.data.corpus import load_corpus
from lmprobe.errors import LmprobeError
from lmprobe.integrations.in_loop import DEFAULT_METHODS, ProxyCallback
from lmprobe.methods.stages import STAGES
from lmprobe.models.llama import Llama, LlamaConfig


def training(model, learning_rate: float):
    """An AdamW optimizer on ``model`` and its jitted step (mean next-token cross-entropy)."""
    optimizer = nnx.Optimizer(model, optax.adamw(learning_rate), wrt=nnx.Param)

    @nnx.jit
    def step(model, optimizer, batch):
        def loss_fn(model):
            logits = model(batch, np.ones(batch.shape, np.int32)).logits[:, :-1]
            return optax.softmax_cross_entropy_with_integer_labels(logits, batch[:, 1:]).mean()

        loss, grads = nnx.value_and_grad(loss_fn)(model)
        optimizer.update(model, grads)
        return loss

    return lambda batch: step(model, optimizer, batch)


def blocks(tokenizer, texts, rows: int, seq: int, count: int) -> np.ndarray:
    """``count`` batches [rows, seq] of the texts' ids, each followed by EOS, cut into blocks."""
    need, ids = count * rows * seq, []
    for text in texts:
        ids += tokenizer(text)["input_ids"] + [tokenizer.eos_token_id]
        if len(ids) >= need:
            return np.asarray(ids[:need], np.int32).reshape(count, rows, seq)
    raise LmprobeError(f"the corpus holds fewer than {need} tokens: lower --calls, --every, --train_batch or --seq")


@main_guard
def main(argv=None):
    p = parser(__doc__, "bench.in_loop")
    p.add_argument("--hidden", type=int, default=128, help="hidden size of the Llama")
    p.add_argument("--layers", type=int, default=4, help="its layers (heads: hidden / 32, KV heads: half)")
    p.add_argument("--train_batch", type=int, default=16, help="sequences per training step")
    p.add_argument("--seq", type=int, default=128, help="tokens per training sequence")
    p.add_argument("--calls", type=int, default=4, help="callback calls")
    p.add_argument("--every", type=int, default=3, help="training steps between calls")
    p.add_argument("--methods", default=",".join(DEFAULT_METHODS), help=f"proxies, of {', '.join(STAGES)}")
    p.add_argument("--examples", type=int, default=32, help="the callback's examples per BYOD metric")
    args = parse(p, argv)
    if args.calls < 2 or args.every < 1:
        raise LmprobeError(f"--calls={args.calls} must be >= 2 (the first compiles) and --every={args.every} >= 1")
    tokenizer = resolve("smollm2-135m").tokenizer()
    docs = load_corpus("fortunes").documents
    heads = max(1, args.hidden // 32)
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=args.hidden, intermediate_size=4 * args.hidden,
                         num_hidden_layers=args.layers, num_attention_heads=heads,
                         num_key_value_heads=max(1, heads // 2), head_dim=32, max_position_embeddings=512,
                         tie_word_embeddings=True)
    model = Llama(config, rngs=nnx.Rngs(args.seed))
    params = sum(x.size for x in jax.tree.leaves(nnx.state(model, nnx.Param)))
    step = training(model, 1e-3)
    data = blocks(tokenizer, docs[:-64], args.train_batch, args.seq, args.calls * args.every)
    with tempfile.TemporaryDirectory() as run_dir:
        start = time.perf_counter()
        probe = ProxyCallback(tokenizer, run_dir, methods=tuple(args.methods.split(",")), heldout=docs[-64:],
                              examples=args.examples, batch_size=args.batch_size, seed=args.seed)
        setup = time.perf_counter() - start
        train_s, call_s, by_method, traces = [], [], [], []
        for k in range(args.calls * args.every):
            start = time.perf_counter()
            loss = float(step(data[k]))  # float(): waits for the step to finish
            train_s.append(time.perf_counter() - start)
            if (k + 1) % args.every == 0:
                start = time.perf_counter()
                metrics = probe(k + 1, model)
                call_s.append(time.perf_counter() - start)
                by_method.append(probe.last_seconds_by_method)
                traces.append(sum(probe.compilations.values()))
                say(f"step {k + 1}: train loss {loss:.3f}, call {call_s[-1]:.2f} s, traces {traces[-1]}, "
                    + ", ".join(f"{key} {v:.4g}" for key, v in metrics.items() if v is not None
                                and not key.endswith("_stderr")))
    step_s = float(np.median(train_s[1:]))
    later = float(np.median(call_s[1:]))
    say(f"\nmodel: Llama hidden {args.hidden}, {args.layers} layers, {params / 1e6:.2f} M params, vocab "
        f"{len(tokenizer)}; device {jax.devices()[0].device_kind} x {jax.device_count()}; training batch "
        f"{args.train_batch} x {args.seq} tokens, AdamW")
    say(f"callback set-up (inputs drawn once, SynTextBench tasks built): {setup:.2f} s")
    say(f"training step: first (compiles) {train_s[0]:.2f} s, then median {step_s * 1e3:.1f} ms")
    say(f"callback call: first (compiles) {call_s[0]:.2f} s, then median {later:.3f} s = "
        f"{later / step_s:.1f} training steps")
    say("  per method, median of later calls: " + ", ".join(
        f"{m} {np.median([b[m] for b in by_method[1:]]):.3f} s" for m in by_method[0]))
    say(f"compilations: {traces[0]} after call 1, {traces[-1]} after call {len(traces)} "
        f"({'no recompilation' if traces[0] == traces[-1] else 'RECOMPILED'})")


if __name__ == "__main__":
    main()
