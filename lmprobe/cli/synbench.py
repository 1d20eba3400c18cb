"""SynBench: robustness-accuracy of representations on synthetic class-conditional Gaussians.

    python -m experiments.synbench --model=NAME [--eps=0,0.2,0.4,0.6,0.8 --a_t=0.6,0.7,0.75,0.8,0.85,0.9 --n=2048
                                   --covariance=identity|band --prior=0.5 --norm=2 --output_dir=runs/synbench]
    lmprobe synbench --model=google/vit-base-patch16-224 --dtype=bfloat16 --scales=reference --eps=0,0.4
    lmprobe synbench --model=random_projection --robust_probe [--probe_attack=input|representation
                     --probe_scale=1 --probe_a_t=0.7] [--baselines --baseline_scale=1]
    lmprobe synbench --model=all-MiniLM-L6-v2 --n=7680 [--inputs=embedding|rms --layer=-1 --input_scales=0.5,1,2]

NAME is ``identity`` (the sanity baseline, score about 1), ``random_projection``, a JAX function
``package.module:function`` mapping inputs [B, *input_shape] to [B, ...], a ViT checkpoint
(model_type "vit": [CLS] of pixel inputs), or a language model (Gaussian input embeddings of
--seq_len tokens through Scorer.embed_inputs: by default drawn with the mean and covariance of its
token embeddings, --inputs=rms for the older RMS scaling; the probes' pooling and --layer). At
eps = 0 the bias-corrected score (unbiased Mahalanobis distance) is printed beside the plug-in
one; both drift with width / n, so compare models at one n / width (e.g. 20).
--input_scales runs one score per factor on the inputs (OUTPUT_DIR/scale-<c>/). Writes OUTPUT_DIR/results.json and
OUTPUT_DIR/bound_threshold.png (the paper's Fig. 3); representations are cached in
OUTPUT_DIR/cache, so a rerun resumes.

--robust_probe then trains a standard and an eps-robust linear probe (10-step PGD-l2 on the input
through the frozen representation, the paper's Sec. 4) at eps = argmax SynBench-Score at --probe_a_t,
in the score's eps convention (relative: eps * ||mu|| of the attacked space), and reports both
probes' standard and robust accuracy (Table 6's layout). The paper's downstream set is CIFAR10;
here it is a labelled Gaussian task at --probe_scale drawn from a held-out seed (offline, for
every representation). --baselines adds App. G's loss-data baselines (Val loss, MDL, SDL, eSC, in
nats) on the cached representations of --baseline_scale.

Compile before you rent (language models): --compile_only [--target=v5e-8] compiles every engine step
the run would execute at its batch geometry (Scorer.embed_inputs of each batch of Gaussian inputs, every
scale and split, every --input_scales factor; the robust probe's with --probe_attack=representation), then
the method's own programs on one device (the Bayes classifiers, the baselines, the robust probe), and
writes per step its shapes, calls, the compiler's memory per device and fit and the TPU cost model's
estimate to OUTPUT_DIR/results.json, reading no weight and running nothing:

    python -m experiments.synbench --model=opt-13b --target=v5e-8 --compile_only
"""

from __future__ import annotations

import dataclasses
import math

from lmprobe.cli import common, flags
from lmprobe.cli.common import load_scorer, main_guard, output_dir, progress, say
from lmprobe.data import gaussian
from lmprobe.errors import LmprobeError
from lmprobe.methods import robust_probe, synbench
from lmprobe.report import plots
from lmprobe.store import join
from lmprobe.text import plural, timings

DEFAULT_MODEL = synbench.IDENTITY


def _scale(text: str):
    return list(gaussian.SCALE_GRIDS[text]) if text in gaussian.SCALE_GRIDS else float(text)


def _norm(text: str) -> float:
    return math.inf if text.lower() in ("inf", "infinity") else float(text)


def _dims(text: str) -> list[int]:
    return [flags.bounded(1)(v) for v in text.split("x")]


@dataclasses.dataclass(frozen=True)
class FrontEnd:
    # identity, random_projection, package.module:function (imported and called: runs that code, name only code
    # you trust), a ViT checkpoint or a language model
    model: str = DEFAULT_MODEL
    input_shape: tuple[int, ...] | None = None  # input of identity / random_projection / functions: 3,224,224 or 8x576
    channel_axis: int | None = None  # channel axis of the band covariance (functions)
    projection_dim: int = synbench.PROJECTION_DIM  # output width of random_projection
    seq_len: int = synbench.DEFAULT_SEQ_LEN  # tokens per Gaussian input (LMs)
    pooling: str | None = None  # LMs: mean, cls, last, first_last_avg (none: last for decoders, mean for encoders)
    layer: int = -1  # LMs: hidden layer to pool (-1: the last, as the real-task probes)
    inputs: str = "embedding"  # LMs: embedding (token embeddings' mean and covariance) or rms (RMS-scaled, signed)
    input_scale: float | None = None  # LMs: factor on the Gaussian inputs (none: 1 for embedding, the RMS for rms)
    input_scales: tuple[float, ...] = ()  # LMs: a sweep, one run per factor in OUTPUT_DIR/scale-<factor>
    output_dir: str = "runs/synbench"  # results.json, bound_threshold.png and the representation cache


def build_parser():
    p = common.parser(__doc__, "synbench")
    common.front_end(p, FrontEnd, convert={"input_shape": _dims, "projection_dim": flags.bounded(1),
                                        "seq_len": flags.bounded(1),
                                        "input_scale": flags.bounded(0, base=float, strict=True),
                                        "input_scales": flags.bounded(0, base=float, strict=True)},
                 choices={"inputs": synbench.INPUTS})
    method = common.method(p, synbench.Config, aliases={"epsilons": "--eps"}, names={"batch_size": "sample_batch_size"},
                        convert={"scales": _scale, "norm": _norm, "batch_size": flags.bounded(1, synbench.MAX_N)},
                        choices={"covariance": gaussian.COVARIANCES, "probe_attack": robust_probe.ATTACKS})
    p.group(common.method_group(synbench.Config)).add_argument(
        "--absolute_eps", dest="relative_epsilon", action="store_false", help="same as --no_relative_epsilon")
    # the models' per-device batch (the shared --batch_size) defaults to one batch of samples: one call each
    p.set_defaults(batch_size=synbench.Config.batch_size)
    common.compile_flags(p)
    return p, method


NOT_COMPILED = ("the eps-robust Bayes classifiers on the representations (l2 and l_p budgets), the loss-data "
                "baselines and the robust probe's training and evaluation are compiled for one device, where a run "
                "puts them (its process's default device), without an estimate; not compiled: the embedding moments "
                "of --inputs=embedding (model.embed over the vocabulary, eager), the Gaussian draws before the "
                "model and the score's small kernels")


def _compile_only(run: common.Run, args, config, out: str) -> None:
    """Every engine step of the language model's run compiled (common.compile_only): synbench.run on its
    representation by a compile-only Scorer, uncached, once per --input_scales factor. Other representations
    have no engine model: one line."""
    kind = synbench.representation_kind(args.model, offline=common.offline(args), revision=args.revision,
                                        allow_pickle=args.allow_pickle)
    if kind != synbench.LANGUAGE_MODEL:
        raise LmprobeError(f"--compile_only compiles a language model's engine steps, and synbench "
                           f"--model={args.model} (a representation of kind {kind}) has no engine model: drop "
                           "--compile_only (and --target), or give a language model")

    def queries(scorer, name):
        for scale in args.input_scales or (None,):
            synbench.run(load_representation(args, run, scale, {name: scorer}), config, progress=progress)

    common.compile_only(run, args, queries, out, notes=[NOT_COMPILED])


def load_representation(args, run: common.Run, input_scale: float | None = None,
                        scorers: dict | None = None) -> synbench.Representation:
    """--model's representation (synbench.load_representation), its models loaded as the
    shared flags describe them and recorded in ``run`` (``input_scale``: instead of --input_scale;
    ``scorers``: language models loaded before, by name, reused and added to)."""
    scorers = {} if scorers is None else scorers

    def scorer(name):
        if name not in scorers:
            scorers[name] = run.loaded(name, load_scorer(args, name))
        return scorers[name]

    rep = synbench.load_representation(
        args.model, load_scorer=scorer,
        load_checkpoint=lambda name: common.load_checkpoint(args, name, tokenizer=False), dtype=common.dtype(args),
        seed=args.seed, batch_size=args.batch_size, input_shape=args.input_shape, channel_axis=args.channel_axis,
        projection_dim=args.projection_dim, seq_len=args.seq_len, pooling=args.pooling, layer=args.layer,
        inputs=args.inputs, input_scale=input_scale or args.input_scale, offline=common.offline(args),
        revision=args.revision, allow_pickle=args.allow_pickle)
    if rep.checkpoint is not None:
        run.checkpoints.append(rep.checkpoint)
    return rep


def summary(result: dict) -> str:
    eps = result["config"]["epsilons"]
    table = {(r["a_t"], r["eps"]): r["score"] for r in result["scores"]}
    fixed = {r["a_t"]: r["score_corrected"] for r in result["scores"] if "score_corrected" in r}
    rep = result["representation"]
    rows = [f"{'a_t':>5} " + " ".join(f"{'eps=' + format(e, 'g'):>9}" for e in eps) + f" {'argmax eps':>11}"
            + (f" {'eps=0 corrected':>16}" if fixed else "")]
    for a in result["config"]["a_t"]:
        corrected = "" if not fixed else f" {'n/a' if fixed[a] is None else format(fixed[a], '.3f'):>16}"
        rows.append(f"{a:>5.2f} " + " ".join(f"{table[(a, e)]:>9.3f}" for e in eps)
                    + f" {result['argmax_eps'][str(a)]:>11g}" + corrected)
    about = rep.get("corrected")
    if about:
        rows.append(f"corrected: unbiased Mahalanobis distance over {about['samples']} samples, k = {about['k']}"
                    + (f"; undefined: {about['reason']}" if about["reason"] else ""))
    took = timings(result["timings_s"], result.get("cached_stages"))
    cfg = result["config"]
    title = (f"== {result['model']}: SynBench-Score (representation dim {rep['dim']}, input "
             f"{tuple(rep['input_shape'])}, {plural(len(cfg['scales']), 'scale')} x {cfg['n']} train + test, "
             f"{cfg['covariance']} covariance, tau = {cfg['prior']}, l{cfg['norm']:g} "
             f"{'relative' if cfg['relative_epsilon'] else 'absolute'} eps)")
    return "\n".join([title, *rows, *probe_summary(result), *baseline_summary(result), f"time: {took}"])


def probe_summary(result: dict) -> list[str]:
    """Table 6's layout: standard vs eps-robust linear probing, clean and robust accuracy."""
    probe = result.get("robust_probe")
    if not probe:
        return []
    kind = "relative" if probe["relative_epsilon"] else "absolute"
    rows = [f"\n-- robust linear probing at eps = argmax score at a_t={probe['a_t']:g}: eps={probe['epsilon']:g} "
            f"({kind}, l2 radius {probe['radius']:.4g} on the {probe['attack']}, ||mu|| {probe['mu_norm']:.4g}); "
            f"downstream: held-out Gaussian task s={probe['scale']:g}, {probe['n_train']} train / "
            f"{probe['n_test']} test",
            f"{'probe':>20} {'accuracy':>9} {'robust acc':>11}"]
    for name, label in (("standard", "standard (eps=0)"), ("robust", f"{probe['epsilon']:g}-robust")):
        rows.append(f"{label:>20} {probe[name]['accuracy']:>9.4f} {probe[name]['robust_accuracy']:>11.4f}")
    return rows


def baseline_summary(result: dict) -> list[str]:
    b = result.get("baselines")
    if not b:
        return []
    sdl = ("> " if b["sdl_is_lower_bound"] else "") + f"{b['sdl']:.2f}"
    return [f"\n-- loss-data baselines (App. G, scale s={b['scale']:g}, n={b['n']}, nats): Val loss "
            f"{b['val_loss']:.4f}, MDL {b['mdl']:.2f}, SDL(eps={b['eps']:g}) {sdl}, eSC {b['esc_text']}"]


@main_guard
def main(argv=None):
    run = common.Run(argv)
    p, method = build_parser()
    args = run.parse(p)
    config = method.make(args)
    config.check()  # bad settings fail before any model loads
    out = output_dir(args.output_dir)  # so does a directory we cannot write
    if common.check_compile_flags(args):
        return _compile_only(run, args, config, out)
    scorers = {}
    for scale in args.input_scales or (None,):
        where = out if scale is None else output_dir(join(out, f"scale-{scale:g}"))
        rep = load_representation(args, run, scale, scorers)
        result = synbench.run(rep, config, cache_dir=join(out, "cache"), progress=progress).to_dict()
        result["argmax_eps"] = {str(a): robust_probe.suggest_epsilon(result["scores"], a) for a in config.a_t}
        run.write(join(where, "results.json"), result)
        say(summary(result))
        plots.draw(plots.synbench_bound_threshold, result, join(where, "bound_threshold.png"))
        say(f"\nresults in {where}")
