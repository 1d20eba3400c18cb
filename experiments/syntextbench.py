"""SynTextBench: robustness-accuracy of sentence embeddings on synthetic sentiment tasks.

    python -m experiments.syntextbench [--model=NAME[,NAME...]] [--n=8192 --a_t=0.7 --lexicon=sentiwordnet
                                        --output_dir=runs/syntextbench --seed=0 --trials=3]
    lmprobe syntextbench --model=minilm-l6 --model=smollm2-135m --levels=0,0.2,0.4 --no_baselines
    lmprobe syntextbench --config=syntextbench.yaml --n=4096

Writes OUTPUT_DIR/results.json and plots (one model), or OUTPUT_DIR/<model>/results.json per
model plus a comparison table and plots (several). Embeddings are cached in OUTPUT_DIR/cache:
a rerun (or a run after an interruption) reuses them.
"""

from __future__ import annotations

import dataclasses
import os
import re

from experiments import cli
from experiments.cli import load_scorer, log, main_guard, output_dir, progress, say
from lmprobe.methods import syntextbench
from lmprobe.report import plots
from lmprobe.report.artifacts import join, write_json

DEFAULT_MODEL = "minilm-l6"


@dataclasses.dataclass(frozen=True)
class FrontEnd:
    model: tuple[str, ...] = (DEFAULT_MODEL,)  # models: local HF dir, hub id, alias, .gguf, smollm2-135m, minilm-l6
    output_dir: str = "runs/syntextbench"  # results.json, plots and the embedding cache
    trials: int = 1  # repeats with seeds seed, seed+1, ...: the score is their mean (the paper: 3 trials, mean +- std)


def build_parser():
    p = cli.parser(__doc__, "syntextbench")
    cli.front_end(p, FrontEnd)
    return p, cli.method(p, syntextbench.Config)


def _slug(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", os.path.basename(name.rstrip("/")) or name)


def _summary(result: dict) -> str:
    rows = [f"{'p':>5} {'accuracy':>9} {'margin':>7} {'lexicon rule':>13} {'in-context':>11}"]
    for level in result["levels"]:
        icl = f"{level['icl_accuracy']:>11.3f}" if "icl_accuracy" in level else f"{'-':>11}"
        rows.append(f"{level['p']:>5.2f} {level['accuracy']:>9.3f} {level['margin']:>7.3f} "
                    f"{level['feasibility']:>13.3f} {icl}")
    base = ", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}"
                     for k, v in result["baselines"].items())
    timings = ", ".join(f"{k} {v:.1f} s" for k, v in result["timings_s"].items())
    sweep = ", ".join(f"{a}: {v:.4f}" for a, v in result["scores_by_a_t"].items())
    head = f"== {result['model']}: SynTextBench score {result['score']:.4f}"
    if "trials" in result:
        t = result["trials"]
        head += f" +- {t['score']['std']:.4f} (mean +- std of {t['trials']} trials, seeds {t['seeds']})"
        sweep = ", ".join(f"{a}: {v['mean']:.4f}" for a, v in t["scores_by_a_t"].items())
    icl_mean = f"; mean in-context accuracy {result['icl_accuracy_mean']:.3f}" if result["icl_accuracy_mean"] else ""
    return "\n".join([f"{head} (a_T = {result['a_t']}, n = {result['n']})", *rows,
                      f"score by a_T: {sweep}{icl_mean}", f"baselines: {base or 'off'}", f"time: {timings}"])


@main_guard
def main(argv=None):
    run = cli.Run(argv)
    p, method = build_parser()
    args = run.parse(p)
    config = method.make(args)
    configs = syntextbench.trial_configs(config, args.trials)
    trial_tasks = [syntextbench.build_tasks(c) for c in configs]  # bad settings and lexicons fail before any model
    lists = trial_tasks[0].lists
    run_dir = output_dir(args.output_dir)  # before any model work: a directory we cannot write fails now
    log.info(f"lexicon {config.lexicon}: {len(lists.positive)} positive, {len(lists.negative)} negative, "
             f"{len(lists.neutral)} neutral words; {len(config.levels)} levels x {config.n} sentences")

    results = []
    for name in args.model:
        scorer = run.loaded(name, load_scorer(args, name))
        trials = [syntextbench.run(scorer, c, model_name=name, tasks=tasks, cache_dir=join(run_dir, "cache"),
                                   progress=progress) for c, tasks in zip(configs, trial_tasks)]
        result = trials[0].to_json()  # levels, baselines and plots: the first trial's
        if len(trials) > 1:
            result["trials"] = syntextbench.summarize_trials(trials)
            result["score"] = result["trials"]["score"]["mean"]
        result["truncated_inputs"] = scorer.truncated
        out = run_dir if len(args.model) == 1 else join(run_dir, _slug(name))
        run.write(join(out, "results.json"), result, names=[name])
        plots.margin_accuracy([result], join(out, "margin_accuracy.png"))
        plots.goodness([result], join(out, "goodness.png"))
        say(_summary(result))
        results.append(result)

    if len(results) > 1:
        table = [{"model": r["model"], "score": r["score"], **{f"baseline_{k}": v for k, v in r["baselines"].items()}}
                 for r in results]
        write_json(join(run_dir, "comparison.json"), table)
        plots.margin_accuracy(results, join(run_dir, "margin_accuracy.png"))
        plots.goodness(results, join(run_dir, "goodness.png"))
        say("\n== comparison")
        for r in sorted(results, key=lambda r: -r["score"]):
            say(f"{r['model']:<40} {r['score']:.4f}")
    say(f"\nresults in {run_dir}")


if __name__ == "__main__":
    main()
