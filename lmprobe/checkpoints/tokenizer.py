"""Tokenizers for checkpoints: transformers' AutoTokenizer on a directory, or built from a
GGUF file's own vocabulary (a slow conversion, cached on disk as a tokenizer.json).

transformers converts GGUF tokenizers of the llama (sentencepiece), gpt2 (byte-level BPE) and t5
kinds, but not llama.cpp's BERT WordPiece vocabularies (``tokenizer.ggml.model == "bert"``, e.g.
nomic-embed): those are rebuilt here (``bert_gguf_tokenizer``)."""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile

from lmprobe.errors import CheckpointError

TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "vocab.json",
    "vocab.txt",
    "merges.txt",
    "tokenizer.model",
    "spiece.model",
    "sentencepiece.bpe.model",
)


def cache_root() -> str:
    """lmprobe's own cache: $LMPROBE_CACHE, else $XDG_CACHE_HOME/lmprobe (~/.cache/lmprobe)."""
    xdg = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.environ.get("LMPROBE_CACHE") or os.path.join(xdg, "lmprobe")


def _from_pretrained(location: str, **kwargs):
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(location, local_files_only=True, **kwargs)
    except Exception as e:  # noqa: BLE001 - transformers raises many kinds; one message for all
        raise CheckpointError(
            f"cannot build the tokenizer of '{location}' ({type(e).__name__}: {e}): copy the "
            "original model's tokenizer files (tokenizer.json, ...) into it"
        ) from None


def directory_tokenizer(directory: str):
    """transformers' tokenizer for a local checkpoint directory."""
    if not any(os.path.isfile(os.path.join(directory, f)) for f in TOKENIZER_FILES):
        raise CheckpointError(
            f"checkpoint directory '{directory}' has no tokenizer files (looked for "
            f"{', '.join(TOKENIZER_FILES)}): copy the original model's tokenizer files into it"
        )
    return _from_pretrained(directory)


def gguf_tokenizer(path: str):
    """The tokenizer stored in a GGUF file; converted once, then loaded from the disk cache."""
    import transformers

    stat = os.stat(path)
    key = f"{os.path.abspath(path)}|{stat.st_size}|{stat.st_mtime_ns}|{transformers.__version__}"
    cached = os.path.join(cache_root(), "gguf-tokenizers", hashlib.sha256(key.encode()).hexdigest()[:24])
    if os.path.isfile(os.path.join(cached, "tokenizer.json")):
        return _from_pretrained(cached)
    if _gguf_field(path, "tokenizer.ggml.model") == "bert":
        tokenizer = bert_gguf_tokenizer(path)
    else:
        tokenizer = _from_pretrained(os.path.dirname(path) or ".", gguf_file=os.path.basename(path))
    _store(tokenizer, cached)
    return tokenizer


def _gguf_field(path: str, key: str):
    from lmprobe.checkpoints.gguf_io import read_header

    return read_header(path)[0].get(key)


PHANTOM_SPACE = "\u2581"
BERT_SPECIALS = {"unk_token": "[UNK]", "sep_token": "[SEP]", "pad_token": "[PAD]", "cls_token": "[CLS]",
                 "mask_token": "[MASK]"}


def bert_gguf_tokenizer(path: str):
    """A BERT WordPiece tokenizer from a llama.cpp BERT-family GGUF file.

    llama.cpp's converter (BertModel.set_vocab) writes WordPiece tokens in "phantom space" form:
    a word-initial token gets a leading U+2581, a continuation token loses its "##", control tokens
    ([CLS], [SEP], ...) stay as they are. This undoes that and rebuilds BERT's pipeline (BERT
    normalizer, pre-tokenizer, [CLS] A [SEP] template). Lower-casing is not recorded in GGUF: it is
    on when no ordinary token holds an upper-case letter (an uncased vocabulary).
    """
    import gguf
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    from lmprobe.checkpoints.gguf_io import read_header

    fields, _ = read_header(path, strings={"tokenizer.ggml.tokens"})
    if "tokenizer.ggml.tokens" not in fields:
        raise CheckpointError(f"GGUF file '{path}' holds no vocabulary (tokenizer.ggml.tokens): load it with "
                              "tokenizer=False, or pass the original model's tokenizer directory")
    tokens = fields["tokenizer.ggml.tokens"]
    types = fields.get("tokenizer.ggml.token_type", [])
    types = list(types) + [int(gguf.TokenType.NORMAL)] * (len(tokens) - len(types))
    vocab, ordinary = {}, []
    for i, (token, kind) in enumerate(zip(tokens, types)):
        if kind != gguf.TokenType.CONTROL:
            token = token[1:] if token.startswith(PHANTOM_SPACE) else "##" + token
            ordinary.append(token)
        vocab.setdefault(token, i)
    missing = [t for t in ("[UNK]", "[CLS]", "[SEP]") if t not in vocab]
    if missing:
        raise CheckpointError(f"GGUF file '{path}' has a BERT vocabulary without {', '.join(missing)}: lmprobe "
                              "cannot rebuild its tokenizer; pass the original model's tokenizer directory")
    lowercase = not any(t != t.lower() for t in ordinary)
    backend = Tokenizer(models.WordPiece(vocab, unk_token="[UNK]", max_input_chars_per_word=100))
    backend.normalizer = normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=True, strip_accents=None,
                                                    lowercase=lowercase)
    backend.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    cls, sep = vocab["[CLS]"], vocab["[SEP]"]
    backend.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1", special_tokens=[("[CLS]", cls), ("[SEP]", sep)])
    backend.decoder = decoders.WordPiece(prefix="##")
    context = fields.get(f"{fields.get('general.architecture')}.context_length", 512)
    return PreTrainedTokenizerFast(
        tokenizer_object=backend, **{k: v for k, v in BERT_SPECIALS.items() if v in vocab},
        model_max_length=int(context), do_lower_case=lowercase,
        model_input_names=["input_ids", "token_type_ids", "attention_mask"])


def _store(tokenizer, target: str) -> None:
    """save_pretrained into `target` atomically; an unwritable cache only costs a reconversion."""
    try:
        os.makedirs(os.path.dirname(target), exist_ok=True)
        staging = tempfile.mkdtemp(dir=os.path.dirname(target))
    except OSError:
        return
    try:
        tokenizer.save_pretrained(staging)
        os.replace(staging, target)
    except OSError:
        shutil.rmtree(staging, ignore_errors=True)
