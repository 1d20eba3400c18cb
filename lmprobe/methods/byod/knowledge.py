"""Knowledge probing via negations, the "Au Contraire" metric (BYOD Sec. 4).

x' puts "not" after the first is / was / were of x (by position; sentences already negated or
without one are skipped). With log(ppl) the mean token NLL in nats:

    sensitivity = 1/n sum_i log ppl(x'_i) - log ppl(x_i)
    normalized  = sensitivity - 1/m sum_i |log ppl(y'_i) - log ppl(y_i)|   (y: a benign corpus)
    percent ppl drops = 1/n sum_i max(sign(log ppl(x_i) - log ppl(x'_i)), 0)

Each pair is scored in one packed row: the words before the negation are computed once.
"""

from __future__ import annotations

import math

import numpy as np

from lmprobe.methods.byod.common import (
    Built,
    MetricResult,
    chunks,
    no_progress,
    result,
    take,
)
from lmprobe.perturb.negation import negate

NOT_NEGATABLE = "no is/was/were, or already negated"
TOO_SHORT = "fewer than 2 tokens (no token to score)"


def build(sentences, limit: int | None) -> Built:
    """(sentence, negated sentence) pairs, in order, until ``limit``."""
    def make(sentence, built):
        negated = negate(sentence)
        if negated is None:
            return built.skip(NOT_NEGATABLE)
        return {"text": sentence, "negated": negated}

    return take(sentences, limit, make)


def log_ppl_deltas(scorer, built: Built, *, progress=no_progress, desc="negation") -> list[dict]:
    """Per pair: log ppl of x and x' and their difference (pairs too short to score are skipped)."""
    records = []
    for _, part in chunks(built.examples, progress, desc):
        original, negated = scorer.score_pairs([e["text"] for e in part], [e["negated"] for e in part])
        for i, e in enumerate(part):
            if min(original.num_predicted[i], negated.num_predicted[i]) < 1:
                built.skip(TOO_SHORT)
                continue
            x, x_neg = float(original.mean_nll[i]), float(negated.mean_nll[i])
            records.append({**e, "log_ppl": x, "log_ppl_negated": x_neg, "delta": x_neg - x})
    return records


def negation(scorer, sentences, benign=None, *, limit: int | None = 1000,
             progress=no_progress) -> MetricResult:
    """The sensitivity score with its normalised variant (over ``benign`` sentences) and the
    share of perplexity drops."""
    built = build(sentences, limit)
    records = log_ppl_deltas(scorer, built, progress=progress)
    deltas = np.asarray([r["delta"] for r in records])
    extra = {"percent_ppl_drops": float(np.mean(deltas < 0)) if len(deltas) else None,
             "normalized": None, "normalized_stderr": None, "benign": None}
    out = result("negation", deltas, built, records, **extra)
    if benign is not None:
        b_built = build(benign, limit)
        b_records = log_ppl_deltas(scorer, b_built, progress=progress, desc="negation (benign)")
        b = result("benign", [abs(r["delta"]) for r in b_records], b_built, [])
        out.extra["benign"] = {"mean_abs_delta": b.score, "stderr": b.stderr, "n": b.n,
                               "skipped": b.skipped}
        if out.score is not None and b.score is not None:
            out.extra["normalized"] = out.score - b.score
            out.extra["normalized_stderr"] = (math.hypot(out.stderr, b.stderr)
                                              if None not in (out.stderr, b.stderr) else None)
        out.records += [{**r, "benign": True} for r in b_records]
    return out
