"""Meta semantic sentences (Sec. 3.1): an evaluator LM B paraphrases each seed sentence x into
candidates s_1..s_n by seeded sampling, then the outputs are cleaned.

The paper asks for five sentences in one prompt ("Please generate 5 sentences with the same
semantic meaning ... Try different styles or expressions"). Small evaluators do not follow a
list instruction reliably, so we ask for ONE rewrite per prompt and draw n independent samples
(temperature / top-p sampling, seeded per prompt), which gives the same n candidates. Models
with a chat template (SmolLM2-Instruct) get the prompt as a user turn; others a completion
prompt ending in "Paraphrase:".
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from lmprobe.methods import model_key, no_progress
from lmprobe.store import cache_key, cached_json, join, json_problem

CACHE_VERSION = 3  # in every key: raised when what an entry holds changes, so that older entries are recomputed
INSTRUCTION = ("Rewrite the following sentence in different words, keeping its meaning. "
               "Try a different style or expression. Reply with the rewritten sentence only.")
_PREFIX = re.compile(r"^\s*(?:[-*•]|\d+[.)]|(?:here is|here's|sure[,!.]?)?[^:\n]{0,40}"
                     r"(?:paraphrase|rewritten sentence|rewrite|sentence|rephrased|answer|output)[^:\n]{0,10}:)\s*",
                     re.IGNORECASE)
_QUOTES = "\"'“”‘’`«»"


@dataclass(frozen=True)
class SamplingConfig:
    n: int = 5  # candidates per seed sentence
    temperature: float = 0.8
    top_p: float = 0.95
    top_k: int = 0
    max_new_tokens: int = 48
    seed: int = 0
    chunk: int = 32  # seed sentences per generation call (and per cache file)


def user_turn(tokenizer, request: str) -> str | None:
    """``request`` as a user turn ending in the assistant's prompt, when the tokenizer has a
    chat template; else None."""
    if not getattr(tokenizer, "chat_template", None):
        return None
    return tokenizer.apply_chat_template([{"role": "user", "content": request}], tokenize=False,
                                         add_generation_prompt=True)


def build_prompt(tokenizer, sentence: str) -> str:
    """The paraphrase request for ``sentence``: a chat turn when the tokenizer has a template."""
    request = f"{INSTRUCTION}\n\nSentence: {sentence}"
    return user_turn(tokenizer, request) or f"{request}\nParaphrase:"


def _normal(text: str) -> str:
    return re.sub(r"[\W_]+", " ", text.lower()).strip()


def clean(output: str, seed: str) -> str | None:
    """The paraphrase in a raw generation: first non-empty line (after a "Here is ...:" line),
    list markers, "Paraphrase:"-style prefixes and surrounding quotes stripped; None when
    nothing is left, it has fewer than two words, or it is the seed again."""
    lines = [line.strip() for line in output.replace("\r", "").split("\n") if line.strip()]
    if len(lines) > 1 and lines[0].endswith(":"):
        lines = lines[1:]
    if not lines:
        return None
    text = lines[0]
    for _ in range(2):
        text = _PREFIX.sub("", text, count=1).strip().strip(_QUOTES).strip()
    if len(_normal(text).split()) < 2 or _normal(text) == _normal(seed):
        return None
    return text


def clean_all(outputs: Sequence[str], seed: str) -> list[str]:
    """Cleaned, de-duplicated paraphrases of one seed (first occurrence kept)."""
    seen, out = set(), []
    for raw in outputs:
        text = clean(raw, seed)
        if text is not None and _normal(text) not in seen:
            seen.add(_normal(text))
            out.append(text)
    return out


def generate_paraphrases(scorer, sentences: Sequence[str], config: SamplingConfig, *,
                         cache_dir: str | None = None, name: str = "evaluator",
                         progress: Callable = no_progress) -> list[list[str]]:
    """Raw generations, ``config.n`` per sentence, in chunks of ``config.chunk`` sentences; each
    chunk is cached as JSON under ``cache_dir`` so an interrupted run resumes."""
    tokenizer = scorer.tokenizer
    out: list[list[str]] = []
    starts = range(0, len(sentences), config.chunk)
    for c, start in enumerate(progress(list(starts), desc=f"{name}: paraphrasing")):
        part = list(sentences[start:start + config.chunk])

        def compute(part=part, c=c):
            prompts = [build_prompt(tokenizer, s) for s in part for _ in range(config.n)]
            ids = scorer.generate(prompts, max_new_tokens=config.max_new_tokens, temperature=config.temperature,
                                  top_p=config.top_p, top_k=config.top_k, seed=config.seed * 100_003 + c,
                                  decode=False)
            texts = [tokenizer.decode(i, skip_special_tokens=True) for i in ids]
            return [texts[i * config.n:(i + 1) * config.n] for i in range(len(part))]

        if cache_dir is None:
            out += compute()
        else:
            key = cache_key(evaluator=name, scorer=model_key(scorer), sentences=part, chunk_index=c,
                            instruction=INSTRUCTION, **vars(config), version=CACHE_VERSION)
            out += cached_json(join(cache_dir, f"paraphrases-{key}.json"), compute,
                               expect=_paraphrases_problem(len(part), config.n))
    return out


def _paraphrases_problem(sentences: int, n: int) -> Callable[[object], str | None]:
    """Why a cache entry's JSON is not ``n`` generations for each of ``sentences`` sentences; None when it is."""
    def problem(value):
        wrong = json_problem(value, [[str]])
        if wrong or (len(value) == sentences and all(len(v) == n for v in value)):
            return wrong
        return (f"has {len(value)} sentences of {sorted({len(v) for v in value})} generations, expected "
                f"{sentences} of {n}")
    return problem
