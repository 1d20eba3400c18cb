"""SynBench: robustness-accuracy of representations on synthetic class-conditional Gaussians.

    python -m experiments.synbench --model=NAME [--eps=0,0.2,0.4,0.6,0.8 --a_t=0.6,0.7,0.8,0.9 --n=2048
                                   --covariance=identity|band --prior=0.5 --norm=2 --output_dir=runs/synbench]

NAME is ``identity`` (the sanity baseline, score about 1), ``random_projection``, a JAX function
``package.module:function`` mapping inputs [B, *input_shape] to [B, ...], a ViT checkpoint
(model_type "vit": [CLS] of pixel inputs), or a language model (Gaussian input embeddings of
--seq_len tokens through Scorer.embed_inputs). Writes OUTPUT_DIR/results.json and
OUTPUT_DIR/bound_threshold.png (the paper's Fig. 3); representations are cached in
OUTPUT_DIR/cache, so a rerun resumes.
"""

from __future__ import annotations

import importlib
import math
import os

from experiments.cli import dtype, load_scorer, main_guard, output_dir, parse, parser, progress, say
from lmprobe.data import gaussian
from lmprobe.errors import LmprobeError
from lmprobe.methods import robust_probe, synbench
from lmprobe.report import plots
from lmprobe.report.artifacts import join, write_json

DEFAULT_MODEL = "identity"
FUNCTION_INPUT_SHAPE = (64,)  # d for identity / random_projection / custom functions (n >> d: score ~ 1)
PROJECTION_DIM = 32


def _floats(text: str, flag: str) -> tuple[float, ...]:
    try:
        return tuple(float(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise LmprobeError(f"{flag}={text!r} must be a comma-separated list of numbers") from None


def _shape(text: str | None, default):
    if not text:
        return default
    try:
        return tuple(int(v) for v in text.replace("x", ",").split(",") if v.strip())
    except ValueError:
        raise LmprobeError(f"--input_shape={text!r} must look like 3,224,224 or 8x576") from None


def _config(args) -> synbench.Config:
    scales = gaussian.SCALE_GRIDS.get(args.scales) or _floats(args.scales, "--scales")
    norm = math.inf if args.norm in ("inf", "Inf", "infinity") else float(args.norm)
    config = synbench.Config(epsilons=_floats(args.eps, "--eps"), a_t=_floats(args.a_t, "--a_t"), scales=scales,
                             n=args.n, covariance=args.covariance, band=_floats(args.band, "--band"),
                             prior=args.prior, norm=norm, relative_epsilon=not args.absolute_eps, seed=args.seed,
                             batch_size=args.batch_size)
    config.check()
    return config


def representation_for(args) -> synbench.Representation:
    """The representation network NAME describes (models load here, after the checks)."""
    name, shape = args.model, _shape(args.input_shape, FUNCTION_INPUT_SHAPE)
    common = {"batch_size": args.batch_size, "channel_axis": args.channel_axis}
    if name == "identity":
        return synbench.identity_representation(shape, **common)
    if name == "random_projection":
        return synbench.random_projection_representation(shape, args.projection_dim, seed=args.seed, **common)
    if ":" in name and not os.path.exists(name):
        module, _, attr = name.partition(":")
        try:
            fn = getattr(importlib.import_module(module), attr)
        except (ImportError, AttributeError) as e:
            raise LmprobeError(f"--model={name}: cannot import function {attr!r} from module {module!r} ({e})") from None
        return synbench.function_representation(name, fn, shape, **common)
    from lmprobe.checkpoints.resolve import resolve
    from lmprobe.models import family_for

    ckpt = resolve(name, offline=args.offline, allow_pickle=args.allow_pickle)
    if family_for(ckpt.config, where=ckpt.location).name == "vit":
        from lmprobe.checkpoints import load
        from lmprobe.models import vit

        loaded = load(name, dtype=dtype(args), offline=args.offline, allow_pickle=args.allow_pickle,
                      tokenizer=False)
        cfg = loaded.config
        mean, std = vit.image_normalization(loaded.checkpoint.location, cfg.num_channels)
        return synbench.vit_representation(loaded.model, name, mean=mean, std=std, image_size=cfg.image_size,
                                           channels=cfg.num_channels, batch_size=args.batch_size)
    scorer = load_scorer(args)
    return synbench.scorer_representation(scorer, name, seq_len=args.seq_len, pooling=args.pooling, layer=args.layer)


def summary(result: dict) -> str:
    eps = result["config"]["epsilons"]
    table = {(r["a_t"], r["eps"]): r["score"] for r in result["scores"]}
    rep = result["representation"]
    rows = [f"{'a_t':>5} " + " ".join(f"{'eps=' + format(e, 'g'):>9}" for e in eps) + f" {'argmax eps':>11}"]
    for a in result["config"]["a_t"]:
        rows.append(f"{a:>5.2f} " + " ".join(f"{table[(a, e)]:>9.3f}" for e in eps)
                    + f" {result['argmax_eps'][str(a)]:>11g}")
    timings = ", ".join(f"{k} {v:.1f} s" for k, v in result["timings_s"].items())
    cfg = result["config"]
    title = (f"== {result['model']}: SynBench-Score (representation dim {rep['dim']}, input "
             f"{tuple(rep['input_shape'])}, {len(cfg['scales'])} scales x {cfg['n']} train + test, "
             f"{cfg['covariance']} covariance, tau = {cfg['prior']}, l{cfg['norm']:g} "
             f"{'relative' if cfg['relative_epsilon'] else 'absolute'} eps)")
    return "\n".join([title, *rows, f"time: {timings}"])


@main_guard
def main(argv=None):
    p = parser(__doc__, default_model=DEFAULT_MODEL)
    p.add_argument("--eps", default="0,0.2,0.4,0.6,0.8", help="robust budgets (fractions of ||mu|| unless --absolute_eps)")
    p.add_argument("--a_t", default="0.6,0.7,0.8,0.9", help="threshold accuracies, each in (0.5, 1)")
    p.add_argument("--n", type=int, default=2048, help="samples per scale in each of the train and test splits")
    p.add_argument("--scales", default="paper", help="paper (0.1..5.0), reference (0.1..4.9) or a comma list")
    p.add_argument("--covariance", choices=gaussian.COVARIANCES, default="identity")
    p.add_argument("--band", default=",".join(map(str, gaussian.DEFAULT_BAND)),
                   help="band covariance: autocovariance c0,c1,c2 along each channel")
    p.add_argument("--prior", type=float, default=0.5, help="class prior tau = P(y = +1)")
    p.add_argument("--norm", default="2", help="p of the l_p budget: 1, 2 or inf")
    p.add_argument("--absolute_eps", action="store_true", help="eps is the radius itself, not a fraction of ||mu||")
    p.add_argument("--input_shape", default=None, help="input shape of identity / random_projection / functions")
    p.add_argument("--channel_axis", type=int, default=None, help="channel axis of the band covariance (functions)")
    p.add_argument("--projection_dim", type=int, default=PROJECTION_DIM)
    p.add_argument("--seq_len", type=int, default=synbench.DEFAULT_SEQ_LEN, help="tokens per Gaussian input (LMs)")
    p.add_argument("--pooling", default=None, help="LMs: mean, cls, last, first_last_avg (default last / mean)")
    p.add_argument("--layer", type=int, default=-1, help="LMs: hidden layer to pool")
    p.add_argument("--output_dir", default="runs/synbench")
    p.set_defaults(batch_size=64)
    args = parse(p, argv)

    config = _config(args)  # bad settings fail before any model loads
    out = output_dir(args.output_dir)  # so does a directory we cannot write
    rep = representation_for(args)
    result = synbench.run(rep, config, cache_dir=join(out, "cache"), progress=progress).to_json()
    result["argmax_eps"] = {str(a): robust_probe.suggest_epsilon(result["scores"], a) for a in config.a_t}
    write_json(join(out, "results.json"), result)
    plots.synbench_bound_threshold(result, join(out, "bound_threshold.png"))
    say(summary(result))
    say(f"\nresults in {out}")


if __name__ == "__main__":
    main()
