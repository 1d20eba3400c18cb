"""BYOD's broken tokenization (Sec. 8, "Broken Token"; A.5 Table 2): chop the raw text every k
characters, tokenize each piece on its own, concatenate the ids. The text is unchanged: the
chopped ids decode to exactly what the normal ids decode to (the text itself for tokenizers that
add no prefix space).

Pieces after the first are tokenized with the tokenizer's prefix space switched off (GPT-2's
ByteLevel add_prefix_space, SentencePiece's Metaspace prepend / normalizer Prepend("▁")): a
piece that starts mid-word must not gain a space. The first piece is tokenized exactly as the
normal tokenization tokenizes the start of a text. The special tokens the normal tokenization
puts at the start (BOS) and end (EOS, SEP) frame the chopped ids in the same way.

WordPiece tokenizers (BERT, MiniLM) are refused: their vocabulary marks word-internal pieces
("##on"), a piece tokenized alone starts a new word and decodes with a space before it, so no
concatenation of separately tokenized pieces spells the text; the metric also needs a causal LM.
"""

from __future__ import annotations

import json
import weakref

from lmprobe.errors import LmprobeError

_NO_PREFIX_CACHE: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def chop(text: str, k: int = 5) -> list[str]:
    """The text cut every k characters (A.5 Table 2 with k = 10; Sec. 8 uses k = 5)."""
    if k < 1:
        raise ValueError(f"k={k}: the split stride must be at least one character")
    return [text[i:i + k] for i in range(0, len(text), k)]


def chopped_ids(tokenizer, text: str, k: int = 5) -> list[int]:
    """Token ids of the text tokenized in k-character pieces, framed by the normal special
    tokens: decode(chopped_ids) == decode(normal ids), skip_special_tokens=True."""
    pieces = chop(text, k)
    if not pieces:
        raise LmprobeError("chopped tokenization of an empty text: drop empty sentences first")
    normal = tokenizer(text, add_special_tokens=True)["input_ids"]
    plain = tokenizer(text, add_special_tokens=False)["input_ids"]
    head, tail = _special_frame(normal, plain, tokenizer)
    first = tokenizer(pieces[0], add_special_tokens=False)["input_ids"]
    rest = [e.ids for e in _no_prefix_backend(tokenizer).encode_batch(pieces[1:], add_special_tokens=False)]
    ids = [*head, *first, *(i for piece in rest for i in piece), *tail]
    want, got = (tokenizer.decode(x, skip_special_tokens=True) for x in (normal, ids))
    if got != want:
        raise LmprobeError(
            f"tokenizer {type(tokenizer).__name__} cannot tokenize {text[:40]!r} in {k}-character "
            f"pieces that decode back to the text (got {got[:60]!r}): use a byte-level BPE or "
            "SentencePiece tokenizer"
        )
    return ids


def _special_frame(normal: list[int], plain: list[int], tokenizer) -> tuple[list[int], list[int]]:
    """The ids the normal tokenization adds before and after the text's own ids."""
    for start in range(len(normal) - len(plain) + 1):
        if normal[start:start + len(plain)] == plain:
            return normal[:start], normal[start + len(plain):]
    raise LmprobeError(f"tokenizer {type(tokenizer).__name__} tokenizes a text differently with "
                       "and without special tokens: chopped tokenization cannot frame it")


def _no_prefix_backend(tokenizer):
    """A copy of the fast tokenizer's backend with every prefix-space rule switched off."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:
        raise LmprobeError(f"tokenizer {type(tokenizer).__name__} is not a fast (tokenizers-backed) "
                           "tokenizer: chopped tokenization needs one (AutoTokenizer(..., use_fast=True))")
    try:
        return _NO_PREFIX_CACHE[backend]
    except (KeyError, TypeError):
        pass
    from tokenizers import Tokenizer

    spec = json.loads(backend.to_str())
    if spec["model"]["type"] == "WordPiece":
        raise LmprobeError(
            f"tokenizer {type(tokenizer).__name__} is WordPiece (BERT-style): pieces tokenized "
            "separately become separate words ('##' continuations are lost), so BYOD's chopped "
            "tokenization cannot keep the text; use a causal LM with a byte-level BPE or "
            "SentencePiece tokenizer"
        )
    spec["normalizer"] = _drop_prepend(spec.get("normalizer"))
    _no_prefix(spec.get("pre_tokenizer"))
    copy = Tokenizer.from_str(json.dumps(spec))
    try:
        _NO_PREFIX_CACHE[backend] = copy
    except TypeError:  # not weak-referenceable: rebuilt per call
        pass
    return copy


def _no_prefix(node) -> None:
    """ByteLevel(add_prefix_space) / Metaspace(prepend_scheme, add_prefix_space) -> off, in place."""
    if isinstance(node, list):
        for item in node:
            _no_prefix(item)
    elif isinstance(node, dict):
        if node.get("type") in ("ByteLevel", "Metaspace"):
            if "add_prefix_space" in node:
                node["add_prefix_space"] = False
            if "prepend_scheme" in node:
                node["prepend_scheme"] = "never"
        for value in node.values():
            if isinstance(value, (dict, list)):
                _no_prefix(value)


def _drop_prepend(node):
    """The normalizer without its Prepend steps (Llama's Prepend("▁"))."""
    if isinstance(node, dict):
        if node.get("type") == "Prepend":
            return None
        if node.get("type") == "Sequence":
            kept = [n for n in (_drop_prepend(n) for n in node["normalizers"]) if n is not None]
            return {**node, "normalizers": kept}
    return node
