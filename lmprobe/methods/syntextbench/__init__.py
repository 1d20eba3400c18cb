"""SynTextBench (Ko et al., COLM 2024): robustness-accuracy of sentence embeddings on
synthetic sentiment tasks generated from a lexicon (Algorithm 1).

    lexicon -> word lists -> one synthetic task per difficulty level p (Sec. 2.2)
    -> sentence embeddings through the engine (Sec. 3.1 poolings), cached per level
    -> class-wise whitening, Bayes classifier, accuracy a_p and mean scaled margin delta_p for
       all levels at once on device (Sec. 2.3, Alg. 1 lines 4-8)
    -> goodness s(a) and score = integral of s over [a_T, 1], exactly (lines 10-11)
plus the loss-data baselines on the p = 0.2 task, in-context accuracy of decoders (Sec. 3.3)
and the lexicon rule's accuracy on each level (task feasibility, A.4).

App. A.2 ablation: with ``Config.generator`` the sets are written by a language model under a
vocabulary constraint instead (``generated_tasks``, lmprobe.methods.syntextbench.generated); each
level also reports the mean share of label-class words per sentence (Fig. 3's statistic).

The package: ``run`` (Config, Result, run: the LM-free sets), ``generated`` (App. A.2's sets).
"""

from lmprobe.methods.syntextbench import generated
from lmprobe.methods.syntextbench.run import (
    A_T_SWEEP,
    CACHE_VERSION,
    DEFAULT_A_T,
    EMBED_CHUNK,
    MIN_N,
    MIN_TEST_SENTENCES,
    Config,
    Result,
    Tasks,
    build_tasks,
    combine,
    default_pooling,
    generated_tasks,
    label_word_fraction,
    level_scores,
    run,
    run_trial,
    summarize_trials,
    trial_configs,
)

__all__ = [
    "A_T_SWEEP",
    "CACHE_VERSION",
    "Config",
    "DEFAULT_A_T",
    "EMBED_CHUNK",
    "MIN_N",
    "MIN_TEST_SENTENCES",
    "Result",
    "Tasks",
    "build_tasks",
    "combine",
    "default_pooling",
    "generated",
    "generated_tasks",
    "label_word_fraction",
    "level_scores",
    "run",
    "run_trial",
    "summarize_trials",
    "trial_configs",
]
