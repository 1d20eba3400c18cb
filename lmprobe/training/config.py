"""What a training run is: the corpus, the tokenizer, the model's size, the optimizer and the checkpoint schedule.

``Config()`` is the default run (sized for about 30 minutes on a quiet 2-core CPU); ``PRESETS["tiny"]``
the seconds-long run the tests use. ``hf_config(config, vocab_size, eos)`` is the Hugging Face
config.json saved with every checkpoint, from which lmprobe rebuilds the model.
"""

from __future__ import annotations

import dataclasses

from lmprobe.errors import LmprobeError

SOURCES = ("fortunes", "wordnet", "rt-reviews", "rt-polarity")  # offline English text (lmprobe.training.corpus)


@dataclasses.dataclass(frozen=True)
class Config:
    # text: fortunes, wordnet (glosses and examples), rt-reviews, rt-polarity (train splits), or what load_corpus reads
    corpus: tuple[str, ...] = ("fortunes", "wordnet", "rt-reviews")
    max_documents: int | None = None  # documents read per corpus (none: all)
    heldout_documents: int = 400  # documents held out for the held-out loss, never trained on
    heldout_seed: int = 0  # the held-out split's seed (fixed across training seeds, so their losses compare)
    tokenizer: str = "bpe"  # bpe: a byte-level BPE trained on the training split; smollm2-135m, or a tokenizer dir
    vocab_size: int = 4096  # the trained BPE's vocabulary (tokenizer=bpe)
    hidden_size: int = 256  # model width
    num_layers: int = 4  # decoder blocks
    num_heads: int = 4  # attention heads (head_dim = hidden_size / num_heads)
    num_kv_heads: int = 2  # key/value heads (grouped-query attention)
    intermediate_size: int = 768  # SwiGLU MLP width
    rope_theta: float = 10000.0  # RoPE base
    seq_len: int = 128  # tokens per packed training sequence (and the model's context)
    train_batch_size: int = 32  # sequences per optimizer step
    steps: int = 1000  # optimizer steps
    learning_rate: float = 2e-3  # peak AdamW learning rate
    warmup_steps: int = 100  # linear warm-up from 0 to the peak, then cosine decay
    final_lr_ratio: float = 0.1  # the cosine ends at this fraction of the peak
    weight_decay: float = 0.1  # AdamW decoupled weight decay (matrices and embeddings; not norms)
    beta2: float = 0.95  # AdamW second-moment decay
    grad_clip: float = 1.0  # global gradient-norm clip (none: 0)
    first_checkpoint: int = 8  # the first checkpoint after step 0; then log-spaced to the last step
    checkpoints_per_octave: int = 1  # checkpoints per doubling of the step (1: 8, 16, 32, ...; 2: 8, 11, 16, ...)
    state_every: int = 250  # also save the optimizer state every this many steps (resume points)
    eval_batch_size: int = 32  # held-out sequences per evaluation batch
    seed: int = 0  # model initialisation and data order

    def __post_init__(self):
        if self.hidden_size % self.num_heads or self.num_heads % self.num_kv_heads:
            raise LmprobeError(f"hidden_size={self.hidden_size}, num_heads={self.num_heads}, num_kv_heads="
                               f"{self.num_kv_heads}: heads must divide hidden_size and kv heads must divide heads")
        if (self.hidden_size // self.num_heads) % 2:
            raise LmprobeError(f"head_dim={self.hidden_size // self.num_heads} must be even (RoPE rotates pairs): "
                               "change hidden_size or num_heads")
        if not self.corpus:
            raise LmprobeError("`corpus` is empty: give at least one text source, e.g. `corpus=fortunes`")


PRESETS = {
    "default": {},
    # the tests: a few hundred fortunes, a 512-id BPE, a 2-layer model, seconds on a CPU
    "tiny": dict(corpus=("fortunes",), max_documents=600, heldout_documents=24, vocab_size=512, hidden_size=32,
                 num_layers=2, num_heads=4, num_kv_heads=2, intermediate_size=64, seq_len=64, train_batch_size=8,
                 steps=40, learning_rate=1e-2, warmup_steps=5, state_every=20, eval_batch_size=8),
}


def preset(name: str, **overrides) -> Config:
    """The Config of a preset, with ``overrides``."""
    if name not in PRESETS:
        raise LmprobeError(f"preset {name!r} is not known: choose from {', '.join(PRESETS)}")
    return Config(**{**PRESETS[name], **overrides})


def checkpoint_steps(config: Config) -> list[int]:
    """The checkpoint schedule: 0, then log-spaced from ``first_checkpoint`` (``checkpoints_per_octave`` per
    doubling), and the last step."""
    out, k = {0, config.steps}, 0
    while (step := round(config.first_checkpoint * 2 ** (k / config.checkpoints_per_octave))) < config.steps:
        out.add(step)
        k += 1
    return sorted(out)


def hf_config(config: Config, vocab_size: int, *, bos: int | None, eos: int | None) -> dict:
    """The Hugging Face LlamaConfig (config.json) of the model ``config`` describes."""
    return {
        "model_type": "llama", "architectures": ["LlamaForCausalLM"], "vocab_size": vocab_size,
        "hidden_size": config.hidden_size, "intermediate_size": config.intermediate_size,
        "num_hidden_layers": config.num_layers, "num_attention_heads": config.num_heads,
        "num_key_value_heads": config.num_kv_heads, "head_dim": config.hidden_size // config.num_heads,
        "hidden_act": "silu", "max_position_embeddings": config.seq_len, "rms_norm_eps": 1e-5,
        "rope_theta": config.rope_theta, "tie_word_embeddings": True, "attention_bias": False, "mlp_bias": False,
        "bos_token_id": bos, "eos_token_id": eos, "torch_dtype": "float32",
    }


def parameter_count(config: Config, vocab_size: int) -> int:
    """Parameters of the model (the tied embedding counted once)."""
    d, hd = config.hidden_size, config.hidden_size // config.num_heads
    attention = d * hd * (2 * config.num_heads + 2 * config.num_kv_heads)
    block = attention + 3 * d * config.intermediate_size + 2 * d
    return vocab_size * d + config.num_layers * block + d

