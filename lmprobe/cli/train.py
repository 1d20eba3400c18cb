"""Train a small Llama-family decoder from scratch on offline English text: checkpoints of known order.

    python -m experiments.train [--output_dir=runs/train]             # the default run (~30 min on 2 quiet CPU cores)
    python -m experiments.train --preset=tiny --output_dir=/tmp/tiny   # seconds (the tests)
    python -m experiments.train --corpus=fortunes,my_texts/ --tokenizer=smollm2-135m --steps=5000

AdamW (optax) with linear warm-up and cosine decay on packed sequences of --seq_len tokens of the
training text (--corpus: fortunes, wordnet glosses and examples, rt-reviews / rt-polarity train
splits, or any file / directory / spec that BYOD's --corpus takes); --heldout_documents documents are
held out (seeded by --heldout_seed) and never trained on. The tokenizer is a byte-level BPE of
--vocab_size ids trained on the training text, or an existing one (--tokenizer=smollm2-135m).

Writes OUTPUT_DIR/checkpoints/<step>/ (Orbax, lmprobe.checkpoints.orbax_io; each loads with
Scorer.load and records its held-out and training loss) at step 0, --first_checkpoint and then
log-spaced steps up to the last, OUTPUT_DIR/results.json (the loss curve, with run_info),
OUTPUT_DIR/loss_curve.png, and the train state (parameters and AdamW moments) in
OUTPUT_DIR/train_state: the same command resumes an interrupted run where it stopped.
Score the checkpoints with `lmprobe sweep --checkpoints=OUTPUT_DIR/checkpoints`; the held-out
documents are in OUTPUT_DIR/heldout.jsonl.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import os
import sys
import time

from lmprobe.cli import common, flags
from lmprobe.cli.common import main_guard, output_dir, progress, say
from lmprobe.errors import LmprobeError
from lmprobe.store import join
from lmprobe.text import number
from lmprobe.training import PRESETS, Config, train


@dataclasses.dataclass(frozen=True)
class FrontEnd:
    preset: str = "default"  # default: about 30 minutes on a quiet 2-core CPU; tiny: seconds (the tests)
    output_dir: str = "runs/train"  # checkpoints/<step>/, results.json, loss_curve.png, train_state/


POSITIVE = ("max_documents", "heldout_documents", "vocab_size", "hidden_size", "num_layers", "num_heads",
            "num_kv_heads", "intermediate_size", "seq_len", "train_batch_size", "steps", "first_checkpoint",
            "checkpoints_per_octave", "state_every", "eval_batch_size")


def build_parser(preset: str = "default"):
    p = common.parser(__doc__, "train")
    common.front_end(p, FrontEnd, choices={"preset": tuple(PRESETS)})
    method = common.method(p, Config, convert={
        **dict.fromkeys(POSITIVE, flags.bounded(1)), "warmup_steps": flags.bounded(0),
        "heldout_seed": flags.bounded(0), "learning_rate": flags.bounded(0, base=float, strict=True),
        "final_lr_ratio": flags.bounded(0, 1, base=float), "weight_decay": flags.bounded(0, base=float),
        "beta2": flags.bounded(0, 1, base=float), "grad_clip": flags.bounded(0, base=float),
        "rope_theta": flags.bounded(0, base=float, strict=True)})
    for name, value in PRESETS[preset].items():  # the preset's values become the defaults (a list stays replaceable)
        current = p.get_default(name)
        p.set_defaults(**{name: type(current)(value) if isinstance(current, tuple) else value})
    return p, method


def _preset(argv) -> str:
    pre = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    pre.add_argument("--preset", default="default")
    name = pre.parse_known_args(sys.argv[1:] if argv is None else [str(a) for a in argv])[0].preset
    if name not in PRESETS:
        raise LmprobeError(f"--preset={name}: choose from {', '.join(PRESETS)}")
    return name


def plot(curve: list[dict], path: str) -> None:
    """Training and held-out loss against tokens seen (log x)."""
    import matplotlib.pyplot as plt

    from lmprobe.report import plots

    fig, ax = plt.subplots(figsize=(5.5, 3.5))
    rows = [r for r in curve if r["tokens"]]
    ax.plot([r["tokens"] for r in rows], [r["heldout_loss"] for r in rows], "o-", label="held-out")
    trained = [r for r in rows if r["train_loss"] is not None]
    ax.plot([r["tokens"] for r in trained], [r["train_loss"] for r in trained], "s--", label="training (mean since "
            "the previous checkpoint)")
    ax.axhline(curve[0]["heldout_loss"], color="grey", lw=0.8, ls=":", label="step 0")
    ax.set(xscale="log", xlabel="training tokens", ylabel="loss (nats per token)")
    ax.legend()
    plots.save_figure(fig, path)


def summary(result, run_dir: str, seconds: float) -> str:
    lines = [f"{'step':>6} {'tokens':>12} {'train loss':>11} {'held-out':>9} {'perplexity':>11} {'seconds':>8}"]
    for r in result.curve:
        lines.append(f"{r['step']:>6} {r['tokens']:>12,} {number(r['train_loss'], '.4f'):>11} "
                     f"{r['heldout_loss']:>9.4f} {math.exp(r['heldout_loss']):>11.1f} {r['seconds']:>8.0f}")
    step = (f"{result.step_seconds * 1e3:.0f} ms per step ({result.step_cpu_seconds * 1e3:.0f} ms of CPU time)"
            if result.step_seconds else "no step run")
    lines.append(f"\n{result.parameters:,} parameters; {result.data['train_tokens']:,} training tokens, "
                 f"{result.data['heldout_tokens']:,} held-out; {step}; {seconds:.0f} s in this process")
    lines.append(f"{len(result.checkpoints)} checkpoints in {os.path.abspath(join(run_dir, 'checkpoints'))}; "
                 f"score them with: lmprobe sweep --checkpoints={join(run_dir, 'checkpoints')}")
    return "\n".join(lines)


@main_guard
def main(argv=None):
    run = common.Run(argv)
    p, method = build_parser(_preset(argv))
    args = run.parse(p)
    if args.preset != _preset(argv):
        raise LmprobeError(f"preset {args.preset!r} comes from --config: give --preset on the command line")
    config = method.make(args)
    started = time.perf_counter()
    run_dir = output_dir(args.output_dir)
    result = train(config, run_dir, progress=progress)
    run.write(join(run_dir, "results.json"),
              {"method": "train", "config": dataclasses.asdict(config), "curve": result.curve,
               "checkpoints": {str(k): v for k, v in result.checkpoints.items()}, "hf_config": result.hf_config,
               "parameters": result.parameters, "data": result.data, "resumed_from": result.resumed_from,
               "step_seconds": result.step_seconds, "step_cpu_seconds": result.step_cpu_seconds,
               "wall_s": time.perf_counter() - started})
    say(summary(result, run_dir, time.perf_counter() - started))
    from lmprobe.report.plots import draw  # matplotlib: imported on use, as plot() does

    draw(plot, result.curve, join(run_dir, "loss_curve.png"))
