"""In-context classification accuracy of a causal LM (SynTextBench Sec. 3.3).

The prompt is the paper's: an instruction, one demonstration per class, then the query; the
prediction is the label word with the higher log-probability after "A:".
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

INSTRUCTION = "Answer the sentiment of the following review, either Positive or Negative.\n\n"
LABEL_WORDS = {1: "Positive", -1: "Negative"}


def prompt(demonstrations: Sequence[tuple[str, int]], query: str, instruction: str = INSTRUCTION) -> str:
    """Instruction, "Q: text\\nA: Label\\n\\n" per demonstration, then "Q: query\\nA:"."""
    shots = "".join(f"Q: {text}\nA: {LABEL_WORDS[label]}\n\n" for text, label in demonstrations)
    return f"{instruction}{shots}Q: {query}\nA:"


def label_log_probs(scorer, prompts: Sequence[str], words: Sequence[str]) -> np.ndarray:
    """[len(prompts), len(words)]: ln p(" word" | prompt), summed over the word's tokens."""
    tok = scorer.tokenizer
    prompt_ids = tok(list(prompts))["input_ids"]
    word_ids = [tok(" " + w, add_special_tokens=False)["input_ids"] for w in words]
    seqs = [p + w for p in prompt_ids for w in word_ids]
    scores = scorer.score(seqs).token_logprobs
    out = np.asarray([s[len(s) - len(word_ids[i % len(words)]):].sum() for i, s in enumerate(scores)])
    return out.reshape(len(prompts), len(words))


def icl_accuracy(scorer, texts: Sequence[str], labels: Sequence[int],
                 demonstrations: Sequence[tuple[str, int]]) -> float:
    """Accuracy of the label word with the higher log-probability, over ``texts``."""
    if not len(texts):
        return float("nan")
    scores = label_log_probs(scorer, [prompt(demonstrations, t) for t in texts],
                             [LABEL_WORDS[1], LABEL_WORDS[-1]])
    predictions = np.where(scores[:, 0] >= scores[:, 1], 1, -1)
    return float(np.mean(predictions == np.asarray(labels)))
