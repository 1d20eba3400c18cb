"""BYOD (Jain et al., arXiv:2306.13651): self-supervised evaluation by a model's sensitivity to text
transformations of the user's own corpus (Eq. 1: SCORE = A{M(f(x), f(x')) for (x, x') in X}).

    corpus -> sentences / paragraphs -> (x, x') pairs per metric (lmprobe.perturb)
    -> each pair scored as one packed row (the tokens x and x' share at the start run once):
       log-perplexities (negation), next-token JSD / entropy / profane-token mass at chosen
       positions, on device; seeded generation. Within a run, a sentence that several metrics
       compare (toxicity, word order, tokenization, entropy) runs once (engine.HiddenMemo)
    -> per-example records, mean (or median) and standard error, skipped sentences and why

Metrics (one module per family): negation (knowledge.py, Sec. 4), toxicity (toxicity.py,
Sec. 5), long_range (long_range.py, Sec. 6), word_order / tokenization / entropy
(next_token.py, Secs. 7-9; word order also net of a null perturbation, the same sentence's
re-chopped tokenization, and per unit of next-token entropy). REGISTRY holds one Metric per name:
how it computes, its default example count (the paper's: 1000, word order 5000; 1000 where the
paper gives none) and what its cache key holds. ``run`` computes the chosen ones on one model,
caching each under a directory so that a rerun resumes. Config.examples sets a metric's count
(``word_order:5000,negation:all``), Config.max_examples every metric's that it does not name.

Corpora, against the paper's: negation is meant for topic sentences of encyclopedic text (Sec.
4.1: Wikipedia); ``topic_sentences`` keeps the first sentence of each document (a Corpus
paragraph) for it. The benign corpus that normalises the negation score is BookCorpus in the
paper (narrative text without a clear truth value); here it is WordNet's gloss examples by
default (experiments.byod --benign=wordnet-examples, offline): definitional rather than benign
text, so the normalised score is not the paper's number; pass --benign for another corpus.
Toxicity's F-bomb count ablation (App. A.2, Fig. 16) is ``trigger_counts``.

Standard errors are over examples: each example is one (x, x') pair (long-range: its JSD
averaged over the target's positions first), so the stderr is that of a paired comparison;
negation's normalised score subtracts an independent sample (the benign corpus), so its stderr
adds the two in quadrature. The median's stderr (word order) is a seeded bootstrap.

An encoder-decoder (T5) runs negation (each sentence scored as the decoder's target given an
empty source, Scorer.score) and toxicity's generation score (the answer to x'); the metrics on
next-token distributions after a text need a causal LM and report an error naming this. An
encoder is refused (``run``: KINDS).
"""

from lmprobe.methods.byod.run import (
    ALL,
    CACHE_VERSION,
    DEFAULT_EXAMPLES,
    KINDS,
    METRICS,
    READINGS,
    REGISTRY,
    Config,
    Metric,
    MetricInputs,
    Result,
    run,
)

__all__ = ["ALL", "CACHE_VERSION", "DEFAULT_EXAMPLES", "KINDS", "METRICS", "READINGS", "REGISTRY", "Config", "Metric",
           "MetricInputs", "Result", "run"]
