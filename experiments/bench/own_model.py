"""A sweep of a user's own model (``--model_fn``, orbax's standard API) against the same weights as an
lmprobe family (lmprobe's Orbax steps): seconds per checkpoint.

    python -m experiments.bench.own_model [--dir=DIR] [--steps=3] [--hidden=64] [--layers=2] [--repeats=1]

One Llama (SmolLM2's tokenizer and vocabulary, random weights, scaled at each step) is saved at each
step twice: by ``orbax_io.save`` (the family: ``lmprobe sweep`` builds a Scorer per step with
Scorer.load) and by orbax's CheckpointManager as a params pytree (``--model_fn=experiments.bench.
own_model:build``: the same Llama's forward pass as a CallableLM, no packed rows; one Scorer, each
step's weights swapped in). Both sweeps run the same settings (BYOD at 16 examples, the held-out loss
of 16 fortunes) in fresh processes, one after the other per repeat; printed: each step's seconds
(the first compiles) and the ratio of the later steps' totals, own model over family.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

SETTINGS = ["--methods=byod", "--byod_examples=16", "--heldout=fortunes", "--heldout_texts=16",
            "--heldout_chars=200", "--verbosity=warning"]
CONFIG = {"model_type": "llama", "vocab_size": 49152, "hidden_size": 64, "intermediate_size": 256,
          "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
          "max_position_embeddings": 256, "tie_word_embeddings": True, "rms_norm_eps": 1e-5}


def _config() -> dict:
    return json.loads(os.environ.get("LMPROBE_BENCH_CONFIG", json.dumps(CONFIG)))


def build(params):
    """The model_fn: the Llama of CONFIG (or $LMPROBE_BENCH_CONFIG) on ``params`` as a CallableLM."""
    from flax import nnx

    from lmprobe.models import FAMILIES
    from lmprobe.models.callable_lm import CallableLM

    family = FAMILIES["llama"]
    cfg = family.config_from_hf(_config())
    graphdef = nnx.graphdef(nnx.eval_shape(lambda: family.model(cfg, rngs=nnx.Rngs(0))))

    def apply(p, ids, mask):
        out = nnx.merge(graphdef, p)(ids, mask)
        return out.logits, out.last_hidden_state

    return CallableLM(apply, params, max_length=cfg.max_position_embeddings)


def write(root: str, steps: int) -> tuple[str, str]:
    """(family directory, own-model directory): the same weights at each step, in both layouts."""
    import jax
    import orbax.checkpoint as ocp
    from flax import nnx

    from lmprobe.checkpoints.orbax_io import save
    from lmprobe.checkpoints.resolve import resolve
    from lmprobe.training.model import init_model

    family, own = os.path.join(root, "family"), os.path.join(root, "own")
    model = init_model(_config(), seed=0).merge()
    tokenizer = resolve("smollm2-135m").tokenizer()
    with ocp.CheckpointManager(own) as manager:
        for step in range(steps):
            save(family, step, model, hf_config=_config(), tokenizer=tokenizer)
            manager.save(step, args=ocp.args.StandardSave(nnx.to_pure_dict(nnx.state(model, nnx.Param))))
            nnx.update(model, jax.tree.map(lambda a: a * 0.9, nnx.state(model, nnx.Param)))
    return family, own


def sweep(checkpoints: str, out: str, *extra: str) -> list[float]:
    """Seconds per step of one ``lmprobe sweep`` in a fresh process."""
    subprocess.run([sys.executable, "-m", "experiments.sweep", f"--checkpoints={checkpoints}", f"--output_dir={out}",
                    *SETTINGS, *extra], check=True, stdout=subprocess.DEVNULL)
    with open(os.path.join(out, "results.json"), encoding="utf-8") as f:
        return [row["seconds"]["total"] for row in json.load(f)["rows"]]


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dir", default=None, help="where the checkpoints go (default: a temporary directory)")
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--hidden", type=int, default=CONFIG["hidden_size"])
    p.add_argument("--layers", type=int, default=CONFIG["num_hidden_layers"])
    p.add_argument("--repeats", type=int, default=1)
    args = p.parse_args(argv)
    config = {**CONFIG, "hidden_size": args.hidden, "intermediate_size": 4 * args.hidden,
              "num_hidden_layers": args.layers, "head_dim": args.hidden // CONFIG["num_attention_heads"]}
    os.environ["LMPROBE_BENCH_CONFIG"] = json.dumps(config)
    root = args.dir or tempfile.mkdtemp(prefix="bench-own-model-")
    family, own = write(root, args.steps)
    for r in range(args.repeats):
        fam = sweep(family, os.path.join(root, f"out-family-{r}"))
        mine = sweep(own, os.path.join(root, f"out-own-{r}"), "--model_fn=experiments.bench.own_model:build",
                     "--tokenizer=smollm2-135m")
        later = sum(mine[1:]) / max(sum(fam[1:]), 1e-9)
        print(f"repeat {r}: family s/step {[round(s, 1) for s in fam]}; own model s/step "
              f"{[round(s, 1) for s in mine]}; later steps own/family {later:.2f}x, first step "
              f"{mine[0] / fam[0]:.2f}x")


if __name__ == "__main__":
    main()
