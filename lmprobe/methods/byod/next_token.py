"""Metrics on the next-token distribution after a sentence (BYOD Secs. 7, 8, 9).

- word order ("Word Salad", Sec. 7, App. A.4): n random words swapped (n = 1 swap of two words
  by default); score = median over examples of JSD(f(x)_{j+1} || f(x')_{j'+1}). Two readings
  beside it, as any perturbation (weight noise, say) raises the JSD and entropy drives it (Sec. 9):
  net of a null perturbation (per sentence, the swap's JSD minus the JSD of the same sentence's
  re-chopped tokenization, a change that keeps the text; mean of the paired differences) and per
  unit of next-token entropy (sum of JSDs / sum of the sentences' next-token entropies);
- tokenization ("Broken Token", Sec. 8, App. A.5): the text chopped every k characters (k = 5),
  the pieces tokenized separately and the ids concatenated (same decoded text); score = mean JSD
  after the last token;
- entropy (Sec. 9, Fig. 11): Shannon entropy of the next-token distribution after a sentence,
  and the sentence entropy, the mean over the sentence's tokens of the entropy of the
  distribution that predicts each of them.
"""

from __future__ import annotations

from lmprobe.errors import LmprobeError
from lmprobe.methods.byod.common import (
    Built,
    MetricResult,
    example_rng,
    mean_stderr,
    median_stderr,
    no_progress,
    paired_stats,
    ratio_of_means,
    result,
    take,
)
from lmprobe.perturb.text import swap_words
from lmprobe.perturb.tokenization import chopped_ids
from lmprobe.text import plural

TOO_FEW_WORDS = "too few words to swap"
TOO_SHORT_TO_CHOP = "not longer than the chop stride"
TOO_SHORT = "fewer than 2 tokens"
TOO_LONG = "chopped tokenization longer than the model's context"
CANNOT_CHOP = "the tokenizer cannot spell it in chopped pieces"
NULL = "re-chopped tokenization of the same sentence"  # word order's null perturbation
LAST = [-1]


def _last_token_stats(scorer, examples: list[dict], a_key: str, b_key: str, progress, desc: str,
                      memo) -> list[dict]:
    """Per example: next_token_stats' numbers after the last token of ``a_key`` and ``b_key``."""
    stats = paired_stats(scorer, [(e[a_key], LAST, e[b_key], LAST) for e in examples], progress, desc, memo=memo)
    return [{key: float(values[0]) for key, values in s.items()} for s in stats]


def chopped_pair(scorer, sentence: str, chop: int, built: Built) -> dict | None:
    """A sentence's normal and ``chop``-character chopped token ids (the tokenization metric's
    pair and word order's null), or None with the reason counted in ``built``."""
    if len(sentence) <= chop:
        return built.skip(TOO_SHORT_TO_CHOP)
    ids = scorer.encode([sentence])[0]
    chopped = chopped_ids(scorer.tokenizer, sentence, chop)
    if len(chopped) > scorer.max_length:
        return built.skip(TOO_LONG)
    return {"text": sentence, "ids": ids, "chopped_ids": chopped, "same_ids": ids == chopped}


def word_order(scorer, sentences, *, n_swaps: int = 1, limit: int | None = 1000, seed: int = 0,
               null_chop: int | None = None, progress=no_progress, memo=None) -> MetricResult:
    """Median JSD after the last token between a sentence and its n-swap version, with two
    readings in ``extra`` (module docstring): ``net_of_null`` (null: the same sentence chopped
    every ``null_chop`` characters; None: no null) and ``per_entropy``, each with its stderr
    over examples. The null's original side is the swap's, so with a ``memo`` it costs one
    forward pass per sentence, its chopped side (which the tokenization metric then reuses)."""
    def make(item, built):
        index, sentence = item
        swapped = swap_words(sentence, n_swaps, example_rng(seed, index))
        if swapped is None:
            return built.skip(TOO_FEW_WORDS)
        return {"text": sentence, "swapped": swapped}

    built = take(enumerate(sentences), limit, make)
    stats = _last_token_stats(scorer, built.examples, "text", "swapped", progress,
                              f"word order ({plural(n_swaps, 'swap')})", memo)
    jsd = [s["jsd"] for s in stats]
    records = [{**e, "jsd": s["jsd"], "next_token_entropy": s["entropy_a"]} for e, s in zip(built.examples, stats)]
    median, median_se = median_stderr(jsd, seed)
    mean, mean_se = mean_stderr(jsd)
    per_entropy, per_entropy_se = ratio_of_means(jsd, [r["next_token_entropy"] for r in records])
    extra = {"n_swaps": n_swaps, "mean": mean, "mean_stderr": mean_se, "aggregate": "median (bootstrap stderr)",
             "per_entropy": per_entropy, "per_entropy_stderr": per_entropy_se,
             "per_entropy_aggregate": "sum of JSDs / sum of next-token entropies (delta-method stderr)"}
    if null_chop is not None:
        extra.update(_net_of_null(scorer, records, null_chop, progress, memo))
    return MetricResult("word_order", median, median_se, len(jsd), dict(built.skipped), records, extra)


def _net_of_null(scorer, records: list[dict], chop: int, progress, memo) -> dict:
    """The null's JSD put in ``records`` ("null_jsd", None where it has none) and the paired
    reading: mean over the sentences with a null of (word-order JSD - null JSD)."""
    skips, nulls = Built([]), []
    for r in records:
        try:
            nulls.append(chopped_pair(scorer, r["text"], chop, skips))
        except LmprobeError:  # a tokenizer that cannot chop this text (lmprobe.perturb.tokenization)
            nulls.append(skips.skip(CANNOT_CHOP))
    have = [i for i, e in enumerate(nulls) if e is not None]
    stats = _last_token_stats(scorer, [nulls[i] for i in have], "ids", "chopped_ids", progress,
                              f"word order's null (chop {chop})", memo)
    for r in records:
        r["null_jsd"] = None
    for i, s in zip(have, stats):
        records[i]["null_jsd"] = s["jsd"]
    paired = [records[i] for i in have]
    net, net_se = mean_stderr([r["jsd"] - r["null_jsd"] for r in paired])
    null, null_se = mean_stderr([r["null_jsd"] for r in paired])
    word_order_mean, _ = mean_stderr([r["jsd"] for r in paired])
    return {"net_of_null": net, "net_of_null_stderr": net_se,
            "null": {"perturbation": NULL, "chop": chop, "n": len(paired), "mean": null, "stderr": null_se,
                     "word_order_mean": word_order_mean, "skipped": dict(skips.skipped)}}


def tokenization(scorer, sentences, *, chop: int = 5, limit: int | None = 1000,
                 progress=no_progress, memo=None) -> MetricResult:
    """Mean JSD after the last token between the normal and the chopped tokenization."""
    built = take(sentences, limit, lambda sentence, built: chopped_pair(scorer, sentence, chop, built))
    jsd = [s["jsd"] for s in _last_token_stats(scorer, built.examples, "ids", "chopped_ids", progress,
                                               f"tokenization (chop {chop})", memo)]
    records = [{"text": e["text"], "tokens": len(e["ids"]), "chopped_tokens": len(e["chopped_ids"]),
                "same_ids": e["same_ids"], "jsd": j} for e, j in zip(built.examples, jsd)]
    return result("tokenization", jsd, built, records, chop=chop)


def entropy(scorer, sentences, *, limit: int | None = 1000, progress=no_progress, memo=None) -> MetricResult:
    """Mean next-token entropy after a sentence (score) and mean sentence entropy, in nats."""
    def make(sentence, built):
        ids = scorer.encode([sentence])[0]
        if len(ids) < 2:
            return built.skip(TOO_SHORT)
        return {"text": sentence, "ids": ids}

    built = take(sentences, limit, make)
    entropies = _entropies(scorer, [e["ids"] for e in built.examples], progress, memo)
    records = [{"text": e["text"], "tokens": len(e["ids"]), "next_token_entropy": float(h[-1]),
                "sentence_entropy": float(h[:-1].mean())} for e, h in zip(built.examples, entropies)]
    sentence, sentence_se = mean_stderr([r["sentence_entropy"] for r in records])
    return result("entropy", [r["next_token_entropy"] for r in records], built, records,
                  sentence_entropy=sentence, sentence_entropy_stderr=sentence_se)


def _entropies(scorer, seqs: list[list[int]], progress, memo) -> list:
    """Next-token entropy at every position of each sequence.

    next_token_stats compares pairs, and entropy needs no partner: sequences of similar length
    are paired with each other (sorted by length), each reporting its own side, so no forward
    pass is wasted. The shorter one repeats its last position to match the count (its extra
    values are dropped); an odd one out is paired with itself.
    """
    order = sorted(range(len(seqs)), key=lambda i: len(seqs[i]))
    couples = [(order[i], order[min(i + 1, len(order) - 1)]) for i in range(0, len(order), 2)]
    pairs = []
    for i, j in couples:
        width = max(len(seqs[i]), len(seqs[j]))
        pairs.append((seqs[i], _padded(len(seqs[i]), width), seqs[j], _padded(len(seqs[j]), width)))
    out = [None] * len(seqs)
    for (i, j), stats in zip(couples, paired_stats(scorer, pairs, progress, "entropy", memo=memo)):
        out[i], out[j] = stats["entropy_a"][:len(seqs[i])], stats["entropy_b"][:len(seqs[j])]
    return out


def _padded(length: int, width: int) -> list[int]:
    return list(range(length)) + [length - 1] * (width - length)
