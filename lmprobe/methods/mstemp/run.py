"""MSTemp end to end (Algorithm 1): for every seed (x, y) and every evaluator LM B,

    n meta semantic sentences from B (paraphrase.py) -> kept when cos(C(x), C(s)) >= tau
    (filter.py) -> templates by parsing (templates.py) -> m fillings each, label y (fill.py)
    -> optional adversarial attack (Sec. 3.2, adversarial.py: greedy attacks that flip the
    target's prediction, or random typo / synonym noise) -> the target's accuracy on D and on D'.

Comparison (Sec. 3.3, accuracy.py): only the contributing seeds (a kept paraphrase and a template
with slots) have generated samples, so the headline ('fair_*' keys) compares the baseline on
those seeds with stratified draws of one generated sample per contributing seed. Beside it, the
baseline on every seed against unstratified draws of N samples ('baseline_accuracy',
'generated_accuracy', 'drop'): these mix a selection effect into the drop (the seeds without
samples differ in difficulty from the others, in either direction: on 24 rt-polarity seeds
smollm2-135m got 0.58 of all seeds but 0.38 of the 13 contributing ones).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

import numpy as np

from lmprobe.errors import LmprobeError
from lmprobe.methods import result
from lmprobe.methods.mstemp import accuracy, adversarial, fill, paraphrase, templates
from lmprobe.methods.mstemp import filter as semantic_filter
from lmprobe.methods.result import Number
from lmprobe.models import CAUSAL_LM, ENCODER_DECODER
from lmprobe.store import StageTimes, note_undefined
from lmprobe.text import plural

ATTACKS = adversarial.ATTACKS
EVALUATOR_KINDS = (CAUSAL_LM, ENCODER_DECODER)  # evaluators generate the paraphrases


@dataclasses.dataclass(frozen=True)
class Config:
    n_templates: int = 5  # n: meta semantic templates kept per seed and evaluator
    n_candidates: int | None = None  # paraphrases sampled per seed (none: n_templates)
    m_samples: int = 3  # m: fillings per template
    # The paper prints no tau. minilm-l6 gives ~0.8 for close paraphrases ("I loved this movie" /
    # "I adored this film": 0.817) and < 0.3 for unrelated sentences; 0.7 keeps near paraphrases.
    tau: float = semantic_filter.DEFAULT_TAU  # cosine threshold of the filter
    # adversarial edits of the generated samples (Sec. 3.2): greedy-* flip the target's prediction
    # (SCoPE's greedy search), random-* are blind random noise
    attack: str = "none"
    attack_strength: int = 1  # edits per generated sample (greedy: at most this many words)
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
        if self.temperature < 0 or not 0 < self.top_p <= 1 or self.max_new_tokens < 1:
            raise LmprobeError(f"temperature={self.temperature} must be >= 0 (0: greedy), top_p={self.top_p} in "
                               f"(0, 1] and max_new_tokens={self.max_new_tokens} >= 1")
        if not -1.0 <= self.tau <= 1.0:
            raise LmprobeError(f"tau={self.tau} is a cosine similarity threshold: give a value in [-1, 1]")
        adversarial.canonical(self.attack)
        if self.attack_strength < 1:
            raise LmprobeError(f"attack_strength={self.attack_strength}: give at least one edit per sample")

    def sampling(self) -> paraphrase.SamplingConfig:
        return paraphrase.SamplingConfig(n=self.candidates, temperature=self.temperature, top_p=self.top_p,
                                         max_new_tokens=self.max_new_tokens, seed=self.seed)


def check_data(data, config: Config | None = None) -> None:
    """An empty dataset, a single class, or ``config.label_names`` that are not one per class
    cannot be evaluated: say so before any model loads."""
    if not len(data):
        raise LmprobeError(f"dataset '{data.source}' is empty: give at least two labelled texts")
    classes = np.unique(data.labels)
    if len(classes) < 2:
        name = data.label_names[int(classes[0])]
        raise LmprobeError(f"dataset '{data.source}' has one class only ('{name}'): accuracy needs "
                           "examples of at least two classes; check `label_column`")
    if config is not None and config.label_names and len(config.label_names) != len(data.label_names):
        raise LmprobeError(f"`label_names` gives {plural(len(config.label_names), 'name')} for "
                           f"{plural(len(data.label_names), 'class', 'classes')} {list(data.label_names)}")


def attack(text: str, name: str, strength: int, rng: np.random.Generator) -> str:
    """The random attacks' ``strength`` successive typo or synonym edits; unchanged when no word
    is eligible or the attack is not random (greedy attacks need the target: ``run``)."""
    return adversarial.random_attack(text, name, strength, rng)


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
                edited = attack(sample, config.attack, config.attack_strength, rng)
                rows.append({"evaluator": name, "seed_index": i, "seed": seed, "paraphrase": sentence,
                             "similarity": similarity, "template": template.render(), "sample": edited,
                             "label": int(label), "label_name": data.label_names[int(label)],
                             **({"unattacked": sample} if config.attack != "none" else {})})
            filled_any |= bool(samples)
        counts["seeds_without_template"] += not filled_any
    counts["samples"] = len(rows)
    counts["acceptance_rate"] = counts["accepted"] / max(counts["cleaned"], 1)
    return rows, counts


def _unknown(target) -> str:
    return getattr(getattr(target, "tokenizer", None), "unk_token", None) or "UNK"


def target_view(target, data, config: Config, *, encoder_pooling: str = "mean") -> adversarial.TargetView:
    """The target's class log-probabilities whose argmax is its prediction on a generated sample
    (``predictions``): zero-shot label-word scores, or the probe trained on every seed."""
    if target.is_decoder or getattr(target, "is_encoder_decoder", False):
        names = config.label_names or data.label_names
        return adversarial.TargetView(lambda texts: accuracy.zero_shot_scores(target, texts, names), _unknown(target))
    seed_z = np.asarray(target.embed(data.texts, pooling=encoder_pooling))
    probe = accuracy.probe_scores(seed_z, np.asarray(data.labels), len(data.label_names))
    return adversarial.TargetView(lambda texts: probe(np.asarray(target.embed(texts, pooling=encoder_pooling))),
                                  _unknown(target))


def predictions(target, data, rows: Sequence[dict], config: Config, *, encoder_pooling: str = "mean"):
    """(predictions on the seeds, on the generated rows, how they were made)."""
    texts = [r["sample"] for r in rows]
    if target.is_decoder or getattr(target, "is_encoder_decoder", False):
        names = config.label_names or data.label_names
        how = " (each the decoder's answer to the prompt)" if not target.is_decoder else ""
        return (accuracy.zero_shot_predictions(target, data.texts, names),
                accuracy.zero_shot_predictions(target, texts, names),
                f"zero-shot label-word log-probabilities over {list(names)}{how}")
    seed_z = np.asarray(target.embed(data.texts, pooling=encoder_pooling))
    other_z = np.asarray(target.embed(texts, pooling=encoder_pooling)) if texts else np.zeros((0, seed_z.shape[1]))
    seed_pred, gen_pred = accuracy.probe_predictions(seed_z, np.asarray(data.labels), other_z, seed=config.seed)
    return seed_pred, gen_pred, (f"linear probe on frozen {encoder_pooling}-pooled embeddings trained on "
                                 f"the seeds ({accuracy.FOLDS}-fold cross-validated on the seeds)")


def greedy_attack(target, data, rows: list[dict], config: Config, progress: Callable = lambda it, **_: it) -> dict:
    """Attack the rows in place with the greedy attack of ``config.attack`` (adversarial.py);
    adds 'unattacked', 'attacked', 'attack_success' and 'attack_words' to every row."""
    view = target_view(target, data, config)
    result = adversarial.greedy_attack(view, [r["sample"] for r in rows], [r["label"] for r in rows],
                                       config.attack, config.attack_strength, seed=config.seed, progress=progress)
    for r, text, attacked, success, words in zip(rows, result.texts, result.attacked, result.success, result.words):
        r.update(unattacked=r["sample"], sample=text, attacked=bool(attacked), attack_success=bool(success),
                 attack_words=list(words))
    return result.stats


def compare(seed_pred, labels, rows: Sequence[dict], gen_pred, evaluators: Sequence[str], counts: dict,
            config: Config) -> dict:
    """The accuracy figures of results.json: the all-seed baseline against unstratified draws
    (the earlier keys) and the fair comparison (module docstring), per evaluator and averaged."""
    labels = np.asarray(labels)
    seed_correct = np.asarray(seed_pred) == labels
    baseline = float(np.mean(seed_correct))
    correct = np.asarray([p == r["label"] for p, r in zip(gen_pred, rows)], bool)
    seeds = np.asarray([r["seed_index"] for r in rows], np.int64)
    per_evaluator, rng = {}, np.random.default_rng(config.seed)
    fair_rng = np.random.default_rng([config.seed, 1])
    for name in evaluators:
        mask = np.asarray([r["evaluator"] == name for r in rows], bool)
        mean, std = accuracy.fair_accuracy(correct[mask], len(labels), config.repeats, rng)
        contributing = np.unique(seeds[mask])
        fair, fair_std = accuracy.stratified_accuracy(correct[mask], seeds[mask], config.repeats, fair_rng)
        fair_baseline = float(seed_correct[contributing].mean()) if len(contributing) else float("nan")
        per_evaluator[name] = {**counts[name], "accuracy": mean, "accuracy_std": std,
                               "accuracy_all_samples": float(correct[mask].mean()) if mask.any() else float("nan"),
                               "expansion": counts[name]["samples"] / len(labels),
                               "contributing_seeds": len(contributing),
                               "baseline_accuracy_contributing": fair_baseline,
                               "accuracy_stratified": fair, "accuracy_stratified_std": fair_std,
                               "accuracy_seed_weighted": accuracy.seed_weighted_accuracy(correct[mask], seeds[mask]),
                               "drop_fair": fair_baseline - fair}
        note_undefined(per_evaluator[name], "null: no generated sample of this evaluator", *_EVALUATOR_FIGURES)
    finite = [v for v in per_evaluator.values() if np.isfinite(v["accuracy"])]
    generated = float(np.mean([v["accuracy"] for v in finite])) if finite else float("nan")
    fair_baseline = float(np.mean([v["baseline_accuracy_contributing"] for v in finite])) if finite else float("nan")
    fair_generated = float(np.mean([v["accuracy_stratified"] for v in finite])) if finite else float("nan")
    out = {
        "baseline_accuracy": baseline, "generated_accuracy": generated, "drop": baseline - generated,
        "relative_drop": (baseline - generated) / baseline if baseline else float("nan"),
        "headline": "fair: baseline on the contributing seeds, generated samples drawn stratified by seed",
        "fair_baseline_accuracy": fair_baseline, "fair_generated_accuracy": fair_generated,
        "fair_drop": fair_baseline - fair_generated,
        "fair_relative_drop": (fair_baseline - fair_generated) / fair_baseline if fair_baseline else float("nan"),
        "contributing_seeds": len(np.unique(seeds)), "per_evaluator": per_evaluator,
    }
    note_undefined(out, "null: no evaluator has generated samples", "generated_accuracy", "drop",
                   "fair_baseline_accuracy", "fair_generated_accuracy", "fair_drop")
    return note_undefined(out, "null: no generated samples, or a baseline accuracy of 0", "relative_drop",
                          "fair_relative_drop")


_EVALUATOR_FIGURES = ("accuracy", "accuracy_std", "accuracy_all_samples", "baseline_accuracy_contributing",
                      "accuracy_stratified", "accuracy_stratified_std", "accuracy_seed_weighted", "drop_fair")


@dataclasses.dataclass
class Generated:
    """The generated set D' of every evaluator (one row per sample), its counts per evaluator, and how long
    generating took: what every target is evaluated on."""

    rows: list[dict]
    counts: dict[str, dict]
    stages: StageTimes


@dataclasses.dataclass
class Result(result.Result):
    """One target on the seeds and on the generated samples: the accuracy figures (``compare``), how the
    target classified, and one row per generated sample with its prediction."""

    target: str
    evaluators: list[str]
    filter: str
    dataset: str
    label_names: list[str]
    classifier: str
    figures: dict
    n_seed: int
    rows: list[dict]
    attack: dict | None
    timings: dict
    cached_stages: dict
    config: Config

    def to_dict(self) -> dict:
        return {"method": "mstemp", "target": self.target, "evaluators": self.evaluators, "filter": self.filter,
                "dataset": self.dataset, "label_names": self.label_names, "classifier": self.classifier,
                **self.figures, "n_seed": self.n_seed, "n_generated": len(self.rows),
                **({"attack": self.attack} if self.attack is not None else {}),
                "timings_s": self.timings, "cached_stages": self.cached_stages,
                "config": dataclasses.asdict(self.config)}

    def numbers(self) -> dict[str, Number]:
        """The fair comparison (module docstring): the baseline on the contributing seeds, the stratified
        generated accuracy and their difference, the accuracy drop."""
        return {f"mstemp_{k}": Number(self.figures[k]) for k in ("fair_baseline_accuracy", "fair_generated_accuracy",
                                                                   "fair_drop")}

    def samples(self):
        return iter(self.rows)


def generate(evaluators: dict, encoder, data, config: Config, *, cache_dir: str | None = None,
             progress: Callable = lambda it, **_: it) -> Generated:
    """Every evaluator's generated set (``evaluators``: name -> decoder Scorer; ``encoder``: the filter)."""
    config.check()
    check_data(data)
    stages = StageTimes()
    with stages("generation", "MSTemp samples"):
        parser = templates.TemplateParser(config.tagger, config.slot_kinds)
        pools = fill.word_pools(parser.protected)
        rows, counts = [], {}
        for name, evaluator in evaluators.items():
            part, counts[name] = generate_samples(evaluator, encoder, data, config, name=name, parser=parser,
                                                  pools=pools, cache_dir=cache_dir, progress=progress)
            rows += part
    return Generated(rows, counts, stages)


def evaluate(target, data, generated: Generated, config: Config, *, target_name: str, filter_name: str,
             progress: Callable = lambda it, **_: it) -> Result:
    """``target`` on the seeds and on ``generated`` (its rows copied: a greedy attack edits them for this
    target alone)."""
    rows = [dict(r) for r in generated.rows]
    stages = StageTimes(dict(generated.stages.seconds), dict(generated.stages.cached))
    attack_stats = None
    if adversarial.canonical(config.attack) in adversarial.GREEDY:
        with stages("attack"):
            attack_stats = greedy_attack(target, data, rows, config, progress)
    with stages("evaluation"):
        seed_pred, gen_pred, how = predictions(target, data, rows, config)
    for r, p in zip(rows, gen_pred):
        r["prediction"] = int(p)
    evaluators = list(generated.counts)
    figures = compare(seed_pred, data.labels, rows, gen_pred, evaluators, generated.counts, config)
    return Result(target_name, evaluators, filter_name, data.source, list(config.label_names or data.label_names),
                  how, figures, len(data), rows, attack_stats, stages.seconds, stages.cached, config)


def run(target, evaluators: dict, encoder, data, config: Config, *, target_name: str, filter_name: str,
        cache_dir: str | None = None, progress: Callable = lambda it, **_: it) -> Result:
    """MSTemp end to end: the evaluators' generated sets (``evaluators``: name -> decoder Scorer), then
    ``target`` evaluated on them."""
    generated = generate(evaluators, encoder, data, config, cache_dir=cache_dir, progress=progress)
    return evaluate(target, data, generated, config, target_name=target_name, filter_name=filter_name,
                    progress=progress)
