"""Golden runs: what users get, recorded before a refactor and compared after it, bitwise on CPU.

    python -m tests.golden record DIR     # run the jobs and the engine batch; write DIR
    python -m tests.golden compare DIR    # run them again; every number must equal DIR's

Two parts. The front ends: tests.user_jobs' jobs that write results.json (fixed seeds), whose
numbers are kept with timings and provenance left out. The engine: every Scorer query on a fixed
batch (the embedded SmolLM2 and MiniLM, a random T5), and the forward pass of a small random
model of every family, its parameters set from their paths (so the numbers do not depend on the
order in which a module creates them).
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import zlib

import numpy as np

from tests import user_jobs

JOBS = [j for j in user_jobs.JOBS if j not in user_jobs.NO_OUTPUT_DIR and j != "throughput"]
VOLATILE = {"timings_s", "run_info", "cached_stages", "seconds", "elapsed_s", "output_dir", "plots", "files"}
TEXTS = ["The cat sat on the mat.", "The cat sat on the hat, and then it slept.", "Hello",
         "Colourless green ideas sleep furiously while the market rallied on Tuesday."]
OTHER = ["The cat sat on the rug.", "The cat did not sit on the hat.", "Goodbye", "Colourless green ideas"]
TINY = dict(vocab_size=97, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, head_dim=8, max_position_embeddings=64)
# model_type -> its HF config keys for a tiny model (beside TINY, whose keys a family ignores when not its own)
CONFIGS = {
    "llama": {}, "mistral": {"sliding_window": 4}, "qwen2": {"use_sliding_window": True, "sliding_window": 4,
                                                             "max_window_layers": 1},
    "gemma3_text": {"query_pre_attn_scalar": 8, "sliding_window": 4, "layer_types": ["sliding_attention",
                                                                                    "full_attention"]},
    "gpt2": {"n_embd": 32, "n_layer": 2, "n_head": 4, "n_positions": 64},
    "gpt_neo": {"num_layers": 2, "num_heads": 4, "attention_types": [[["global", "local"], 1]], "window_size": 4},
    "gpt_neox": {"rotary_pct": 0.5}, "gptj": {"n_embd": 32, "n_layer": 2, "n_head": 4, "rotary_dim": 4,
                                              "n_positions": 64},
    "mpt": {"d_model": 32, "n_layers": 2, "n_heads": 4, "max_seq_len": 64, "expansion_ratio": 2},
    "opt": {"ffn_dim": 64, "word_embed_proj_dim": 32},
    "bert": {"type_vocab_size": 2}, "roberta": {"type_vocab_size": 1, "pad_token_id": 1},
    "distilbert": {"dim": 32, "n_layers": 2, "n_heads": 4, "hidden_dim": 64},
    "mpnet": {}, "nomic_bert": {"n_embd": 32, "n_layer": 2, "n_head": 4, "n_inner": 64, "n_positions": 64,
                                "rotary_emb_fraction": 1.0, "type_vocab_size": 2},
    "t5": {"d_model": 32, "d_kv": 8, "d_ff": 64, "num_layers": 2, "num_heads": 4},
}


def kept(path: str) -> bool:
    """False for a timing, a memory reading or provenance: what differs between two runs of the same code."""
    key = path.rsplit(".", 1)[-1]
    return not (key in VOLATILE or "seconds" in key or key.endswith("_s") or "rss" in key)


def numbers(tree, path=""):
    """(path, value) of every number and string in a results.json tree, volatile keys left out."""
    if isinstance(tree, dict):
        for k, v in sorted(tree.items()):
            if kept(f"{path}.{k}"):
                yield from numbers(v, f"{path}.{k}")
    elif isinstance(tree, list):
        for i, v in enumerate(tree):
            yield from numbers(v, f"{path}[{i}]")
    else:
        yield path, tree


def front_ends(work: str) -> dict:
    out = {}
    for job in JOBS:
        done = user_jobs.run(job, os.path.join(work, job))
        if done.returncode:
            raise SystemExit(f"{job} failed:\n{done.stderr[-4000:]}")
        for root, _, files in os.walk(os.path.join(work, job)):
            for f in files:
                if f == "results.json":
                    rel = os.path.relpath(os.path.join(root, f), work)
                    with open(os.path.join(root, f)) as fh:
                        out[rel] = dict(numbers(json.load(fh)))
        print(f"{job}: done", flush=True)
    return out


def set_params(model, seed: int = 0) -> None:
    """Every parameter drawn from a generator keyed by its path: the same values whatever the build order."""
    from flax import nnx

    for path, var in nnx.to_flat_state(nnx.state(model, nnx.Param)):
        name = ".".join(map(str, path))
        rng = np.random.default_rng([seed, zlib.crc32(name.encode())])
        value = var.get_value()
        scale = 0.2 if value.ndim == 1 or name.endswith(("weight", "bias", "scale")) else value.shape[-1] ** -0.5
        var.set_value(np.asarray(rng.standard_normal(value.shape) * scale, value.dtype))


def tiny(model_type: str):
    from flax import nnx
    from transformers import AutoConfig

    from lmprobe.models import FAMILIES

    config = AutoConfig.for_model(model_type, **TINY, **CONFIGS[model_type]).to_dict()
    family = FAMILIES[model_type]
    model = family.model(family.config_from_hf(config), rngs=nnx.Rngs(0))
    set_params(model)
    return family, model


def families() -> dict:
    from lmprobe.models import FAMILIES

    out = {}
    rng = np.random.default_rng(0)
    ids = rng.integers(3, TINY["vocab_size"], (3, 12))
    mask = (np.arange(12) < np.array([[12], [7], [1]])).astype(np.int32)
    for model_type in sorted(FAMILIES):
        if model_type == "vit":
            continue
        family, model = tiny(model_type)
        if family.is_encoder_decoder:
            enc = model.encode(ids, mask, output_hidden_states=True)
            dec = model.decode(ids[:, :6], enc.last_hidden_state, mask, mask[:, :6], output_hidden_states=True)
            outs = {"encoder": enc.hidden_states, "decoder": dec.hidden_states, "logits": dec.logits}
        else:
            o = model(ids, mask, output_hidden_states=True)
            outs = {"hidden": o.hidden_states, "logits": o.logits}
        for k, v in outs.items():
            if v is not None:
                out[f"family/{model_type}/{k}"] = np.asarray(v)
    return out


def engine() -> dict:
    from lmprobe.engine import HiddenMemo, Scorer

    out = {}
    dec = Scorer.load("smollm2-135m", batch_size=2)
    s = dec.score(TEXTS)
    out.update({f"score/{i}": r for i, r in enumerate(s.token_logprobs)})
    a, b = dec.score_pairs(TEXTS, OTHER)
    out.update({f"pairs/{i}": r for i, r in enumerate(a.token_logprobs + b.token_logprobs)})
    stats = dec.next_token_stats(TEXTS, [[-1, 0]] * 4, OTHER, [[-1, 0]] * 4, token_set=[5, 17, 300], top_k=3,
                                 memo=HiddenMemo())
    out.update({f"stats/{k}/{i}": v for k, vs in stats.items() for i, v in enumerate(vs)})
    for pooling in ("mean", "last", "first_last_avg"):
        out[f"embed/{pooling}"] = dec.embed(TEXTS, pooling=pooling)
    out["embed_inputs"] = dec.embed_inputs(np.random.default_rng(1).standard_normal((3, 5, 576)).astype(np.float32))
    greedy = dec.generate(TEXTS, max_new_tokens=6, decode=False)
    sampled = dec.generate(TEXTS, max_new_tokens=6, temperature=0.8, top_k=20, top_p=0.9, seed=3, decode=False)
    allowed = np.zeros(dec.vocab_size, bool)
    allowed[[11, 12, 13, 400]] = True
    constrained = dec.generate(TEXTS, max_new_tokens=4, allowed=allowed, decode=False)
    for name, rows in (("greedy", greedy), ("sampled", sampled), ("allowed", constrained)):
        out.update({f"generate/{name}/{i}": np.asarray(r) for i, r in enumerate(rows)})
    enc = Scorer.load("minilm-l6", batch_size=2)
    out["encoder/embed"] = enc.embed(TEXTS)
    out["encoder/cls"] = enc.embed(TEXTS, pooling="cls", layer=3)
    _, t5 = tiny("t5")
    t5s = Scorer(t5, batch_size=2)
    src, tgt = [[5, 6, 7, 1], [9, 1]], [[4, 8, 1], [3, 3, 3, 3, 1]]
    out.update({f"t5/targets/{i}": r for i, r in enumerate(t5s.score_targets(src, tgt).token_logprobs)})
    out.update({f"t5/score/{i}": r for i, r in enumerate(t5s.score(tgt).token_logprobs)})
    out.update({f"t5/generate/{i}": np.asarray(r) for i, r in enumerate(t5s.generate(src, max_new_tokens=5,
                                                                                        decode=False))})
    out["t5/embed"] = t5s.embed(src)
    return out


def collect() -> tuple[dict, dict]:
    with tempfile.TemporaryDirectory(prefix="lmprobe-golden-") as work:
        jobs = front_ends(work)
    return jobs, {**engine(), **families()}


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[0] not in ("record", "compare"):
        print(__doc__, file=sys.stderr)
        return 2
    verb, where = argv
    jobs, arrays = collect()
    if verb == "record":
        os.makedirs(where, exist_ok=True)
        with open(os.path.join(where, "front_ends.json"), "w") as f:
            json.dump(jobs, f, indent=1, sort_keys=True)
        np.savez(os.path.join(where, "engine.npz"), **arrays)
        print(f"recorded {sum(map(len, jobs.values()))} numbers of {len(jobs)} results.json and "
              f"{len(arrays)} engine arrays in {where}")
        return 0
    with open(os.path.join(where, "front_ends.json")) as f:
        want_jobs = json.load(f)
    want = dict(np.load(os.path.join(where, "engine.npz")))
    bad = []
    for rel in sorted(set(want_jobs) | set(jobs)):
        a, b = ({k: v for k, v in side.get(rel, {}).items() if kept(k)} for side in (want_jobs, jobs))
        bad += [f"{rel}:{k}: {a.get(k)!r} -> {b.get(k)!r}" for k in sorted(set(a) | set(b))
                if json.dumps(a.get(k)) != json.dumps(b.get(k))]
    for k in sorted(set(want) | set(arrays)):
        if k not in want or k not in arrays:
            bad.append(f"engine {k}: only in {'the record' if k in want else 'this run'}")
        elif want[k].shape != arrays[k].shape or want[k].tobytes() != np.asarray(arrays[k], want[k].dtype).tobytes():
            diff = np.abs(np.asarray(want[k], float) - np.asarray(arrays[k], float)).max() \
                if want[k].shape == arrays[k].shape else "shape"
            bad.append(f"engine {k}: differs (max |diff| {diff})")
    print("\n".join(bad) if bad else "")
    print(f"{len(bad)} differences; compared {sum(map(len, want_jobs.values()))} numbers of {len(want_jobs)} "
          f"results.json and {len(want)} engine arrays, bitwise")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
