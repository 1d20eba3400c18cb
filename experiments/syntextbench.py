"""SynTextBench: robustness-accuracy of sentence embeddings on synthetic sentiment tasks.

    python -m experiments.syntextbench [--model=NAME[,NAME...]] [--n=8192 --a_t=0.7 --lexicon=sentiwordnet
                                        --output_dir=runs/syntextbench --seed=0]

Writes OUTPUT_DIR/results.json and plots (one model), or OUTPUT_DIR/<model>/results.json per
model plus a comparison table and plots (several). Embeddings are cached in OUTPUT_DIR/cache:
a rerun (or a run after an interruption) reuses them.
"""

from __future__ import annotations

import argparse
import os
import re

from experiments.cli import load_scorer, main_guard, output_dir, parse, parser, progress, say
from lmprobe.methods import syntextbench
from lmprobe.report import plots
from lmprobe.report.artifacts import join, write_json

DEFAULT_MODEL = "minilm-l6"


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
    return "\n".join([f"== {result['model']}: SynTextBench score {result['score']:.4f} "
                      f"(a_T = {result['a_t']}, n = {result['n']})", *rows,
                      f"baselines: {base or 'off'}", f"time: {timings}"])


@main_guard
def main(argv=None):
    p = parser(__doc__, default_model=DEFAULT_MODEL)
    p.add_argument("--n", type=int, default=8192, help="sentences per difficulty level (train + test)")
    p.add_argument("--a_t", type=float, default=syntextbench.DEFAULT_A_T, help="accuracy threshold of the score")
    p.add_argument("--lexicon", default="sentiwordnet",
                   help="sentiwordnet, vader, afinn, textblob, or a path (SentiWordNet 3.0 text file or word<TAB>score)")
    p.add_argument("--levels", default=None, help="comma-separated mixing ratios p (default: 0, 0.05, ..., 0.95)")
    p.add_argument("--p_n", type=float, default=syntextbench.Config.p_n,
                   help="share of steps that repeat an unpaired word (0: the paper's no-nesting ablation)")
    p.add_argument("--p_e", type=float, default=syntextbench.Config.p_e, help="end-of-sentence probability")
    p.add_argument("--pooling", default=None, help="mean, cls, last, first_last_avg (default: the paper's per model type)")
    p.add_argument("--no_baselines", action="store_true", help="skip Val loss / MDL / SDL / eSC")
    p.add_argument("--baseline_steps", type=int, default=4000)
    p.add_argument("--icl_examples", type=int, default=256, help="test sentences per level for in-context accuracy")
    p.add_argument("--output_dir", default="runs/syntextbench")
    args = parse(p, argv)
    models = [m for m in args.model.split(",") if m]

    config = syntextbench.Config(
        lexicon=args.lexicon, n=args.n, a_t=args.a_t, p_e=args.p_e, p_n=args.p_n, pooling=args.pooling, seed=args.seed,
        baselines=not args.no_baselines, baseline_steps=args.baseline_steps, icl_examples=args.icl_examples,
        **({"levels": tuple(float(x) for x in args.levels.split(","))} if args.levels else {}))
    tasks = syntextbench.build_tasks(config)  # bad settings and lexicons fail before any model loads
    lists = tasks.lists
    run_dir = output_dir(args.output_dir)  # before any model work: a directory we cannot write fails now
    say(f"lexicon {args.lexicon}: {len(lists.positive)} positive, {len(lists.negative)} negative, "
          f"{len(lists.neutral)} neutral words; {len(config.levels)} levels x {config.n} sentences")

    results = []
    for name in models:
        scorer = load_scorer(argparse.Namespace(**{**vars(args), "model": name}))
        result = syntextbench.run(scorer, config, model_name=name, tasks=tasks,
                                  cache_dir=join(run_dir, "cache"), progress=progress).to_json()
        result["truncated_inputs"] = scorer.truncated
        out = run_dir if len(models) == 1 else join(run_dir, _slug(name))
        write_json(join(out, "results.json"), result)
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
