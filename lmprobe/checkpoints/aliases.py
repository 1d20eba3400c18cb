"""Short model names from the papers -> Hugging Face hub ids (looked up case-insensitively)."""

from __future__ import annotations


def _family(org: str, names: list[str], template: str = "{}") -> dict[str, str]:
    return {name: f"{org}/{template.format(name)}" for name in names}


_PYTHIA = ["70m", "160m", "410m", "1b", "1.4b", "2.8b", "6.9b", "12b"]

ALIASES: dict[str, str] = {
    **_family("openai-community", ["gpt2", "gpt2-medium", "gpt2-large", "gpt2-xl"]),
    "gpt-neo-125m": "EleutherAI/gpt-neo-125m",
    "gpt-neo-1.3b": "EleutherAI/gpt-neo-1.3B",
    "gpt-neo-2.7b": "EleutherAI/gpt-neo-2.7B",
    **_family("EleutherAI", [f"pythia-{s}" for s in _PYTHIA]),
    **_family("EleutherAI", [f"pythia-{s}-deduped" for s in _PYTHIA]),
    **_family("databricks", ["dolly-v2-3b", "dolly-v2-7b", "dolly-v2-12b"]),
    **_family("facebook", [f"opt-{s}" for s in ["125m", "350m", "1.3b", "2.7b", "6.7b", "13b", "30b", "66b"]]),
    **_family("huggyllama", ["llama-7b", "llama-13b", "llama-30b", "llama-65b"]),
    **{f"llama-2-{s}": f"meta-llama/Llama-2-{s}-hf" for s in ["7b", "13b", "70b"]},
    **{f"llama-2-{s}-chat": f"meta-llama/Llama-2-{s}-chat-hf" for s in ["7b", "13b", "70b"]},
    "bert-base": "google-bert/bert-base-uncased",
    "bert-large": "google-bert/bert-large-uncased",
    **_family("google-bert", [f"bert-{s}-{c}" for s in ["base", "large"] for c in ["uncased", "cased"]]),
    **_family("FacebookAI", ["roberta-base", "roberta-large"]),
    "distilbert": "distilbert/distilbert-base-uncased",
    "distilbert-base-uncased": "distilbert/distilbert-base-uncased",
    "smollm2-135m-hf": "HuggingFaceTB/SmolLM2-135M",
    "gpt-j-6b": "EleutherAI/gpt-j-6b",
    **_family("mosaicml", ["mpt-7b", "mpt-7b-instruct", "mpt-30b"]),
    **_family("google", [f"flan-t5-{s}" for s in ["small", "base", "large", "xl", "xxl"]]),
    **_family("google-t5", [f"t5-{s}" for s in ["small", "base", "large", "3b", "11b"]]),
    **_family("google", [f"t5-v1_1-{s}" for s in ["small", "base", "large", "xl", "xxl"]]),
    **{f"qwen2.5-{s.lower()}": f"Qwen/Qwen2.5-{s}" for s in ["0.5B", "1.5B", "3B", "7B", "14B", "32B", "72B"]},
    **_family("google", ["gemma-3-270m", "gemma-3-1b-pt"]),
    "all-mpnet-base-v2": "sentence-transformers/all-mpnet-base-v2",
    "nomic-embed-text-v1.5": "nomic-ai/nomic-embed-text-v1.5",
    "all-minilm-l6-v2": "sentence-transformers/all-MiniLM-L6-v2",
}


def lookup(name: str) -> str | None:
    """The hub id for an alias (any case), or None."""
    return ALIASES.get(name.lower())
