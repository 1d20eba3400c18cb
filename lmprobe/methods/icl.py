"""In-context classification accuracy of a causal LM (SynTextBench Sec. 3.3).

The prompt is the paper's: an instruction, one demonstration per class, then the query; the
prediction is the label word with the higher log-probability after "A:".
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from lmprobe.errors import LmprobeError
from lmprobe.methods import no_progress

INSTRUCTION = "Answer the sentiment of the following review, either Positive or Negative.\n\n"
LABEL_WORDS = {1: "Positive", -1: "Negative"}
CHUNK = 256  # prompts per engine call: one step of the progress bar


def prompt(demonstrations: Sequence[tuple[str, int]], query: str, instruction: str = INSTRUCTION) -> str:
    """Instruction, "Q: text\\nA: Label\\n\\n" per demonstration, then "Q: query\\nA:"."""
    shots = "".join(f"Q: {text}\nA: {LABEL_WORDS[label]}\n\n" for text, label in demonstrations)
    return f"{instruction}{shots}Q: {query}\nA:"


def label_log_probs(scorer, prompts: Sequence[str], words: Sequence[str], *, progress: Callable = no_progress,
                    desc: str = "in-context prompts") -> np.ndarray:
    """[len(prompts), len(words)]: ln p(" word" | prompt), summed over the word's tokens; the
    prompts run CHUNK at a time through ``progress``.

    The word's tokens are those of prompt + " " + word tokenized together, after the prompt's own
    tokens (lm-eval-harness's rule): tokenized alone, " word" can start with a stray space token
    (SentencePiece), which the model never reads in that place."""
    starts = range(0, len(prompts), CHUNK)
    out = [_chunk_log_probs(scorer, list(prompts[s:s + CHUNK]), list(words))
           for s in progress(starts, desc=desc, total=len(starts))]
    return np.concatenate(out) if out else np.zeros((0, len(words)))


def _chunk_log_probs(scorer, prompts: list[str], words: list[str]) -> np.ndarray:
    tok = scorer.tokenizer
    prompt_lengths = [len(ids) for ids in tok(prompts)["input_ids"]]
    seqs = tok([p + " " + w for p in prompts for w in words])["input_ids"]
    counts = [len(seq) - prompt_lengths[i // len(words)] for i, seq in enumerate(seqs)]
    if min(counts, default=1) < 1:
        i = counts.index(min(counts))
        raise LmprobeError(f"label word {words[i % len(words)]!r} adds no token to prompt {i // len(words)}: "
                           "the tokenizer merges it into the prompt's end; end the prompt with a separator")
    scores = scorer.score(seqs).token_logprobs
    out = np.asarray([s[len(s) - k:].sum() for s, k in zip(scores, counts)])
    return out.reshape(len(prompts), len(words))


def icl_accuracies(scorer, tasks: Sequence[tuple[Sequence[str], Sequence[int], Sequence[tuple[str, int]]]], *,
                   progress: Callable = no_progress, desc: str = "in-context prompts") -> list[float]:
    """Accuracy per task (texts, labels, demonstrations); all prompts share one pass and one bar."""
    prompts = [prompt(demos, t) for texts, _, demos in tasks for t in texts]
    scores = label_log_probs(scorer, prompts, [LABEL_WORDS[1], LABEL_WORDS[-1]], progress=progress, desc=desc)
    predictions = np.where(scores[:, 0] >= scores[:, 1], 1, -1)
    bounds = np.cumsum([0] + [len(texts) for texts, _, _ in tasks])
    return [float(np.mean(predictions[a:b] == np.asarray(labels))) if b > a else float("nan")
            for (_, labels, _), a, b in zip(tasks, bounds[:-1], bounds[1:])]


def icl_accuracy(scorer, texts: Sequence[str], labels: Sequence[int],
                 demonstrations: Sequence[tuple[str, int]], *, progress: Callable = no_progress) -> float:
    """Accuracy of the label word with the higher log-probability, over ``texts``."""
    return icl_accuracies(scorer, [(texts, labels, demonstrations)], progress=progress)[0]
