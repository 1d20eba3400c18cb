"""MSTemp (Liu et al., arXiv:2310.01448v2): meta semantic templates. Seed sentences are
paraphrased by evaluator LMs, filtered by an encoder's cosine similarity, parsed into templates
whose slots are refilled with same-category words, and the target model's accuracy on the seeds
is compared with its accuracy on the generated samples.

    paraphrase.py  meta semantic sentences (Sec. 3.1)      filter.py  semantic-preserving filter
    templates.py   parsing into templates (Sec. 3.1)       fill.py    real evaluation samples (3.2)
    lexicon.py     word categories and sentiment words     accuracy.py accuracies, fair comparison (3.3)
    run.py         Algorithm 1 end to end: generate (the evaluators' sets), evaluate (a target on them)
"""

from lmprobe.methods.mstemp.run import (
    EVALUATOR_KINDS,
    Config,
    Generated,
    Result,
    check_data,
    evaluate,
    generate,
    generate_samples,
    run,
)

__all__ = ["EVALUATOR_KINDS", "Config", "Generated", "Result", "check_data", "evaluate", "generate", "generate_samples",
           "run"]
