"""MSTemp end to end (Algorithm 1): for every seed (x, y) and every evaluator LM B,

    n meta semantic sentences from B (paraphrase.py) -> kept when cos(C(x), C(s)) >= tau
    (filter.py) -> templates by parsing (templates.py) -> m fillings each, label y (fill.py)
    -> optional typo / synonym attack (Sec. 3.2) -> the target's accuracy on D and on D',
    compared fairly by drawing N of the generated samples several times (evaluate.py, Sec. 3.3).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence

import numpy as np

from lmprobe.errors import LmprobeError
from lmprobe.methods.mstemp import evaluate, fill, paraphrase, templates
from lmprobe.methods.mstemp import filter as semantic_filter
from lmprobe.perturb.constraints import Constraints
from lmprobe.perturb.synonym import synonym_swap
from lmprobe.perturb.typo import typo

ATTACKS = {"none": None, "typo": typo, "synonym": synonym_swap}


@dataclasses.dataclass(frozen=True)
class Config:
    n_templates: int = 5  # n: meta semantic templates kept per seed and evaluator
    n_candidates: int | None = None  # paraphrases sampled per seed (none: n_templates)
    m_samples: int = 3  # m: fillings per template
    # The paper prints no tau. minilm-l6 gives ~0.8 for close paraphrases ("I loved this movie" /
    # "I adored this film": 0.817) and < 0.3 for unrelated sentences; 0.7 keeps near paraphrases.
    tau: float = semantic_filter.DEFAULT_TAU  # cosine threshold of the filter
    attack: str = "none"  # adversarial edits of the generated samples (Sec. 3.2)
    attack_strength: int = 1  # edits per generated sample
    tagger: str = "auto"  # part-of-speech tagger: auto (nltk when its data is installed, else wordnet), nltk, wordnet
    slot_kinds: tuple[str, ...] = templates.SLOT_KINDS  # kinds of template slots that are refilled
    repeats: int = 10  # draws of N generated samples (Sec. 3.3)
    temperature: float = 0.8  # paraphrase sampling temperature
    top_p: float = 0.95  # paraphrase sampling nucleus mass
    max_new_tokens: int = 48  # tokens per paraphrase
    # words for the classes in class order, for the zero-shot prompt (none: the data's)
    label_names: tuple[str, ...] | None = None
    seed: int = 0

    @property
    def candidates(self) -> int:
        return self.n_candidates or self.n_templates

    def check(self) -> None:
        if self.n_templates < 1 or self.m_samples < 1 or self.candidates < 1 or self.repeats < 1:
            raise LmprobeError("n_templates, n_candidates, m_samples and repeats must all be >= 1")
        if not -1.0 <= self.tau <= 1.0:
            raise LmprobeError(f"tau={self.tau} is a cosine similarity threshold: give a value in [-1, 1]")
        if self.attack not in ATTACKS:
            raise LmprobeError(f"unknown attack '{self.attack}': use one of {', '.join(ATTACKS)}")
        if self.attack_strength < 1:
            raise LmprobeError(f"attack_strength={self.attack_strength}: give at least one edit per sample")

    def sampling(self) -> paraphrase.SamplingConfig:
        return paraphrase.SamplingConfig(n=self.candidates, temperature=self.temperature, top_p=self.top_p,
                                         max_new_tokens=self.max_new_tokens, seed=self.seed)


def check_data(data) -> None:
    """An empty dataset or a single class cannot be evaluated: say so before any model loads."""
    if not len(data):
        raise LmprobeError(f"dataset '{data.source}' is empty: give at least two labelled texts")
    classes = np.unique(data.labels)
    if len(classes) < 2:
        name = data.label_names[int(classes[0])]
        raise LmprobeError(f"dataset '{data.source}' has one class only ('{name}'): accuracy needs "
                           "examples of at least two classes; check --label_column")


def attack(text: str, name: str, strength: int, rng: np.random.Generator) -> str:
    """``strength`` successive typo or synonym edits (SCoPE's perturbations); unchanged when
    no word is eligible."""
    edit = ATTACKS[name]
    for _ in range(strength if edit else 0):
        text = edit(text, rng, Constraints()) or text
    return text


def generate_samples(evaluator, encoder, data, config: Config, *, name: str, parser=None, pools=None,
                     cache_dir: str | None = None, progress: Callable = lambda it, **_: it) -> tuple[list[dict], dict]:
    """One evaluator's generated set D' (one row per sample) and its counts."""
    parser = parser or templates.TemplateParser(config.tagger, config.slot_kinds)
    pools = pools or fill.word_pools(parser.protected)
    raw = paraphrase.generate_paraphrases(evaluator, data.texts, config.sampling(), cache_dir=cache_dir,
                                          name=name, progress=progress)
    cleaned = [paraphrase.clean_all(outputs, seed) for outputs, seed in zip(raw, data.texts)]
    scores = semantic_filter.similarities(encoder, data.texts, cleaned)
    rows, counts = [], dict(candidates=sum(map(len, raw)), cleaned=sum(map(len, cleaned)), accepted=0,
                            seeds_without_paraphrase=0, seeds_without_template=0, templates=0,
                            templates_without_slots=0, samples=0)
    for i, (seed, label) in enumerate(progress(list(zip(data.texts, data.labels)), desc=f"{name}: templates")):
        kept = semantic_filter.keep(cleaned[i], scores[i], config.tau, config.n_templates)
        counts["accepted"] += len(kept)
        counts["seeds_without_paraphrase"] += not kept
        filled_any = False
        for j, (sentence, similarity) in enumerate(kept):
            template = parser(sentence)
            counts["templates"] += 1
            rng = np.random.default_rng([config.seed, i, j])
            samples = fill.fill_templates(template, config.m_samples, pools, rng)
            counts["templates_without_slots"] += not samples
            for sample in samples:
                rows.append({"evaluator": name, "seed_index": i, "seed": seed, "paraphrase": sentence,
                             "similarity": similarity, "template": template.render(),
                             "sample": attack(sample, config.attack, config.attack_strength, rng),
                             "label": int(label), "label_name": data.label_names[int(label)]})
            filled_any |= bool(samples)
        counts["seeds_without_template"] += not filled_any
    counts["samples"] = len(rows)
    counts["acceptance_rate"] = counts["accepted"] / max(counts["cleaned"], 1)
    return rows, counts


def predictions(target, data, rows: Sequence[dict], config: Config, *, encoder_pooling: str = "mean"):
    """(predictions on the seeds, on the generated rows, how they were made)."""
    texts = [r["sample"] for r in rows]
    if target.is_decoder or getattr(target, "is_encoder_decoder", False):
        names = config.label_names or data.label_names
        how = " (each the decoder's answer to the prompt)" if not target.is_decoder else ""
        return (evaluate.zero_shot_predictions(target, data.texts, names),
                evaluate.zero_shot_predictions(target, texts, names),
                f"zero-shot label-word log-probabilities over {list(names)}{how}")
    seed_z = np.asarray(target.embed(data.texts, pooling=encoder_pooling))
    other_z = np.asarray(target.embed(texts, pooling=encoder_pooling)) if texts else np.zeros((0, seed_z.shape[1]))
    seed_pred, gen_pred = evaluate.probe_predictions(seed_z, np.asarray(data.labels), other_z, seed=config.seed)
    return seed_pred, gen_pred, (f"linear probe on frozen {encoder_pooling}-pooled embeddings trained on "
                                 f"the seeds ({evaluate.FOLDS}-fold cross-validated on the seeds)")


def run(target, evaluators: dict, encoder, data, config: Config, *, target_name: str,
        filter_name: str, cache_dir: str | None = None,
        progress: Callable = lambda it, **_: it) -> tuple[dict, list[dict]]:
    """results.json's dict and the sample rows. ``evaluators``: name -> decoder Scorer."""
    config.check()
    check_data(data)
    timings, start = {}, time.perf_counter()
    parser = templates.TemplateParser(config.tagger, config.slot_kinds)
    pools = fill.word_pools(parser.protected)
    rows, counts = [], {}
    for name, evaluator in evaluators.items():
        part, counts[name] = generate_samples(evaluator, encoder, data, config, name=name, parser=parser,
                                              pools=pools, cache_dir=cache_dir, progress=progress)
        rows += part
    timings["generation"] = time.perf_counter() - start

    start = time.perf_counter()
    seed_pred, gen_pred, how = predictions(target, data, rows, config)
    timings["evaluation"] = time.perf_counter() - start
    labels = np.asarray(data.labels)
    baseline = float(np.mean(seed_pred == labels))
    correct = np.asarray([p == r["label"] for p, r in zip(gen_pred, rows)], bool)
    for r, p in zip(rows, gen_pred):
        r["prediction"] = int(p)

    per_evaluator, rng = {}, np.random.default_rng(config.seed)
    for name in evaluators:
        mask = np.asarray([r["evaluator"] == name for r in rows], bool)
        mean, std = evaluate.fair_accuracy(correct[mask], len(data), config.repeats, rng)
        per_evaluator[name] = {**counts[name], "accuracy": mean, "accuracy_std": std,
                               "accuracy_all_samples": float(correct[mask].mean()) if mask.any() else float("nan"),
                               "expansion": counts[name]["samples"] / len(data)}
    accuracies = [v["accuracy"] for v in per_evaluator.values() if np.isfinite(v["accuracy"])]
    generated = float(np.mean(accuracies)) if accuracies else float("nan")
    result = {
        "method": "mstemp", "target": target_name, "evaluators": list(evaluators), "filter": filter_name,
        "dataset": data.source, "label_names": list(config.label_names or data.label_names),
        "classifier": how, "baseline_accuracy": baseline, "generated_accuracy": generated,
        "drop": baseline - generated, "relative_drop": (baseline - generated) / baseline if baseline else float("nan"),
        "n_seed": len(data), "n_generated": len(rows), "per_evaluator": per_evaluator,
        "timings_s": timings, "config": dataclasses.asdict(config),
    }
    return result, rows
