"""Smoke run: load both embedded models, score a sentence, embed two sentences.

    python -m experiments.smoke [--model=smollm2-135m] [--encoder=minilm-l6]
    lmprobe smoke --dtype=bfloat16 --model_parallel=2
"""

from __future__ import annotations

import dataclasses
import time

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from lmprobe.cli import common
from lmprobe.cli.common import main_guard, say
from lmprobe.models import CAUSAL_LM


@dataclasses.dataclass(frozen=True)
class FrontEnd:
    model: str = "smollm2-135m"  # causal LM to load and score the text with
    encoder: str = "minilm-l6"  # sentence encoder to load
    text: str = "The capital of France is Paris."  # the sentence scored


def build_parser():
    p = common.parser(__doc__, "smoke")
    common.front_end(p, FrontEnd)
    return p


def _timed_load(name, args):
    start = time.perf_counter()
    loaded = common.load_checkpoint(args, name)
    jax.block_until_ready(nnx.state(loaded.model))
    return loaded, time.perf_counter() - start


def sentence_nll(loaded, text: str) -> tuple[float, int]:
    """Mean next-token negative log-likelihood (nats) of ``text`` and its token count."""
    ids = loaded.tokenizer(text)["input_ids"]
    ids = jnp.asarray([ids])
    logits = loaded.model(ids).logits[0, :-1]
    logp = jax.nn.log_softmax(logits, axis=-1)
    nll = -jnp.take_along_axis(logp, ids[0, 1:, None], axis=-1).mean()
    return float(nll), ids.shape[1]


def mean_pooled(loaded, texts: list[str]) -> np.ndarray:
    batch = loaded.tokenizer(texts, padding=True, return_tensors="np")
    out = loaded.model(batch["input_ids"], batch["attention_mask"])
    mask = batch["attention_mask"][..., None]
    return np.asarray((out.last_hidden_state * mask).sum(1) / mask.sum(1))


@main_guard
def main(argv=None):
    args = common.parse(build_parser(), argv)
    common.require_kind(args, [args.model], "smoke --model", (CAUSAL_LM,))
    lm, lm_s = _timed_load(args.model, args)
    nll, n = sentence_nll(lm, args.text)
    say(f"{args.model}: {lm.family.name}, loaded in {lm_s:.1f} s; "
          f"{args.text!r}: {n} tokens, mean NLL {nll:.3f} nats, perplexity {np.exp(nll):.1f}")

    enc, enc_s = _timed_load(args.encoder, args)
    a, b = mean_pooled(enc, ["I loved this movie.", "I adored this film."])
    cos = float(a @ b / np.linalg.norm(a) / np.linalg.norm(b))
    say(f"{args.encoder}: {enc.family.name}, loaded in {enc_s:.1f} s; "
          f"cosine('I loved this movie.', 'I adored this film.') = {cos:.3f}")
