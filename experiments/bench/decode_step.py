"""One decoding step after a long prompt, lmprobe beside transformers' PyTorch model, in one run.

    python -m experiments.bench.decode_step [--model=smollm2-135m --rows=4 --prompt=990 --steps=32 --repeats=5]

A step is timed apart from the prefill: each side generates 1 and then 1 + ``--steps`` new tokens from the
same ``--rows`` random prompts of ``--prompt`` tokens (greedy, no early stop), each the fastest of
``--repeats`` calls after a warm-up, and a step is the difference over ``--steps``. The two lengths alternate
call by call, so a slow minute of a shared machine falls on both. fp32 on this host's default device.
"""

from __future__ import annotations

import argparse
import importlib.util
import time

import numpy as np

from lmprobe.cli.throughput import torch_reference
from lmprobe.engine import Scorer


def fastest(calls: dict, repeats: int) -> dict:
    """{name: fastest seconds of ``repeats`` calls} after one warm-up call each, the calls interleaved."""
    for fn in calls.values():
        fn()
    best = dict.fromkeys(calls, float("inf"))
    for _ in range(repeats):
        for name, fn in calls.items():
            start = time.perf_counter()
            fn()
            best[name] = min(best[name], time.perf_counter() - start)
    return best


def lmprobe_calls(scorer: Scorer, prompts: np.ndarray, steps: int) -> dict:
    seqs = prompts.tolist()
    return {new: (lambda new=new: scorer.generate(seqs, max_new_tokens=new, eos_id=-1, decode=False))
            for new in (1, 1 + steps)}


def torch_calls(model, prompts: np.ndarray, steps: int) -> dict:
    import torch

    ids = torch.as_tensor(prompts)

    def generate(new):
        with torch.inference_mode():
            model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=new, min_new_tokens=new,
                           do_sample=False, pad_token_id=0)

    return {new: (lambda new=new: generate(new)) for new in (1, 1 + steps)}


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", default="smollm2-135m")
    p.add_argument("--rows", type=int, default=4)
    p.add_argument("--prompt", type=int, default=990)
    p.add_argument("--steps", type=int, default=32)
    p.add_argument("--repeats", type=int, default=5)
    args = p.parse_args(argv)
    scorer = Scorer.load(args.model)
    prompts = np.random.default_rng(0).integers(10, scorer.vocab_size, size=(args.rows, args.prompt))
    sides = {"lmprobe": lambda: lmprobe_calls(scorer, prompts, args.steps)}
    if importlib.util.find_spec("torch") is not None:
        reference = torch_reference(args.model)
        sides["transformers"] = lambda: torch_calls(reference, prompts, args.steps)
    print(f"{args.model}, {args.rows} rows, {args.prompt}-token prompt, fp32; fastest of {args.repeats}")
    print(f"{'':<14}{'prefill + 1 token':>18}{'a step after it':>17}")
    results = {}
    for side, calls in sides.items():
        best = fastest(calls(), args.repeats)
        step = (best[1 + args.steps] - best[1]) / args.steps
        results[side] = {"first_token_s": best[1], "step_s": step}
        print(f"{side:<14}{best[1]:>16.3f} s{step * 1e3:>14.1f} ms")
    return results


if __name__ == "__main__":
    main()
