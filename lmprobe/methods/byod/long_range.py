"""Context (long-range) sensitivity, the "Back to the Future" metric (BYOD Sec. 6, App. A.3).

Of the last ``window`` (3) sentences of a paragraph, the first k (2) are replaced by sentences of
another paragraph; the score is the JSD between the next-token distributions of x and x' at
every position that predicts a token of the last sentence, averaged over those positions, then
over examples (LRS score). The ablation varies k (App. A.3, Fig. 18).

Alignment: both texts end in the very same target token ids. Each text is tokenized whole (with
the tokenizer's special tokens, BOS or not) and cut where the target starts; x' is its own
context ids followed by x's target ids. The positions compared are those just before each target
token, counted from each text's own start, so a BOS shifts nothing.
"""

from __future__ import annotations

import numpy as np

from lmprobe.methods.byod.common import (
    Built,
    MetricResult,
    example_rng,
    no_progress,
    paired_stats,
    result,
)
from lmprobe.perturb.text import long_range_pair

WINDOW = 3
MIN_SENTENCES = 6
TOO_FEW = f"paragraph of fewer than {MIN_SENTENCES} sentences (or fewer than the window)"
NO_PAIR = "no replacement could be made (donor too short)"
TOO_LONG = "longer than the model's context"
STRADDLES = "a token spans the context/target boundary"
NO_DONOR = "no other paragraph to take sentences from"


def split_ids(tokenizer, context: str, target: str) -> tuple[list[int], list[int]] | None:
    """Token ids of ``context + " " + target`` cut into (context ids, target ids).

    Special tokens before the text (BOS) stay with the context; special tokens after it (an EOS
    some tokenizers append) are dropped. None when a token spans the boundary.
    """
    text = f"{context} {target}"
    enc = tokenizer(text, return_offsets_mapping=True, return_special_tokens_mask=True)
    ids, offsets, special = enc["input_ids"], enc["offset_mapping"], enc["special_tokens_mask"]
    boundary = len(context)
    body = [i for i, s in enumerate(special) if not s]
    if not body:
        return None
    head = [i for i in body if offsets[i][0] < boundary]
    tail = [i for i in body if offsets[i][0] >= boundary]
    if not head or not tail or any(offsets[i][1] > boundary + 1 for i in head):
        return None  # (a token may end on the separating space: "." + " " never merge in BPE)
    cut = tail[0]
    return ids[:cut], ids[cut:body[-1] + 1]


def build(paragraphs, tokenizer, *, k: int, limit: int | None, seed: int,
          max_length: int | None = None) -> Built:
    """(x ids, x' ids, positions) examples from paragraphs, in order, until ``limit``."""
    built = Built([])
    window = max(WINDOW, k + 1)
    donors = [p for p in paragraphs if len(p) >= max(k, 1)]
    for index, paragraph in enumerate(paragraphs):
        if limit is not None and len(built.examples) >= limit:
            break
        if len(paragraph) < max(MIN_SENTENCES, window):
            built.skip(TOO_FEW)
            continue
        if len(donors) < 2:
            built.skip(NO_DONOR)
            continue
        rng = example_rng(seed, index)
        j = int(rng.integers(len(donors)))
        donor = donors[j] if donors[j] is not paragraph else donors[(j + 1) % len(donors)]
        pair = long_range_pair(paragraph, donor, k=k, window=window, min_sentences=max(MIN_SENTENCES, window))
        if pair is None:
            built.skip(NO_PAIR)
            continue
        original = split_ids(tokenizer, pair.context, pair.target)
        perturbed = split_ids(tokenizer, pair.perturbed_context, pair.target)
        if original is None or perturbed is None:
            built.skip(STRADDLES)
            continue
        (context, target), (perturbed_context, natural_target) = original, perturbed
        if max_length and max(len(context), len(perturbed_context)) + len(target) > max_length:
            built.skip(TOO_LONG)
            continue
        built.examples.append({
            "context": pair.context, "perturbed_context": pair.perturbed_context, "target": pair.target,
            "x": context + target, "x_perturbed": perturbed_context + target,
            "positions": list(range(len(context) - 1, len(context) + len(target) - 1)),
            "positions_perturbed": list(range(len(perturbed_context) - 1,
                                              len(perturbed_context) + len(target) - 1)),
            "target_tokens": len(target), "natural_alignment": natural_target == target})
    return built


def long_range(scorer, paragraphs, *, k: int = 2, limit: int | None = 1000, seed: int = 0,
               progress=no_progress) -> MetricResult:
    """The LRS score: mean over examples of the mean JSD over the last sentence's positions."""
    built = build(paragraphs, scorer.tokenizer, k=k, limit=limit, seed=seed, max_length=scorer.max_length)
    stats = paired_stats(scorer, [(e["x"], e["positions"], e["x_perturbed"], e["positions_perturbed"])
                                  for e in built.examples], progress, f"long-range (k={k})")
    records = [{"context": e["context"], "perturbed_context": e["perturbed_context"], "target": e["target"],
                "target_tokens": e["target_tokens"], "natural_alignment": e["natural_alignment"],
                "jsd": float(np.mean(s["jsd"]))} for e, s in zip(built.examples, stats)]
    natural = [r["natural_alignment"] for r in records]
    return result("long_range", [r["jsd"] for r in records], built, records, k=k,
                  naturally_aligned_fraction=float(np.mean(natural)) if natural else None)
