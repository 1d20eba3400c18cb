"""Tokenizers rebuilt from a GGUF file's own metadata with the `tokenizers` library (no torch, no
transformers GGUF integration), returned as a transformers ``PreTrainedTokenizerFast``.

llama.cpp's converter stores a tokenizer as metadata: ``tokenizer.ggml.model`` (its kind), ``.pre``
(the pre-tokenizer of a byte-level BPE), ``.tokens``, ``.merges`` or ``.scores``, ``.token_type``,
the special ids, ``.add_bos_token`` / ``.add_eos_token`` / ``.add_space_prefix`` and
``tokenizer.chat_template``. Each kind is rebuilt the way llama.cpp tokenizes it
(src/llama-vocab.cpp), in the shapes transformers' own GGUF conversion uses
(integrations/gguf/gguf_tokenizer_mapping.py):

- ``gpt2``: byte-level BPE; the text is split by the regexes llama.cpp lists for the ``pre`` type.
- ``llama``: SentencePiece BPE with byte fallback; a space prefixes every text fragment when
  ``add_space_prefix`` (default true) says so, as llama.cpp and the original Llama tokenizer do.
- ``llama`` under a Gemma architecture: the same, with Gemma's two fixes: tokens of several
  spaces respelled with U+2581, and merges rebuilt in file order (Gemma files store none).
- ``bert``: WordPiece (``wordpiece_tokenizer``).

CONTROL tokens become special added tokens, USER_DEFINED ones plain added tokens, as transformers
does. An unknown kind or pre type is a CheckpointError: llama.cpp refuses such a file too.
"""

from __future__ import annotations

import dataclasses
import logging

from gguf import TokenType

from lmprobe.checkpoints.gguf_io import HOW_TO_FALL_BACK, read_header
from lmprobe.errors import CheckpointError

log = logging.getLogger(__name__)

BUILDER_VERSION = "1"  # bump whenever a builder's output changes: it keys the disk cache of built tokenizers

SPACE = "\u2581"  # SentencePiece's visible space
GEMMA_ARCHS = frozenset({"gemma", "gemma2", "gemma3"})
STRING_KEYS = frozenset({"tokenizer.ggml.tokens", "tokenizer.ggml.merges"})
SPECIAL_IDS = {"bos_token": "bos_token_id", "eos_token": "eos_token_id", "unk_token": "unknown_token_id",
               "pad_token": "padding_token_id"}
SPM_DEFAULT_IDS = {"bos_token": 1, "eos_token": 2, "unk_token": 0}  # llama.cpp's, for files that omit them

# --- pre-tokenizer split regexes per tokenizer.ggml.pre (llama.cpp's llm_tokenizer_bpe table; the
# original tokenizer.json regex where llama.cpp rewrote one for std::regex) ------------------------------

_CONTRACTIONS = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)"
GPT2 = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"
LLAMA3 = _CONTRACTIONS + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
QWEN2 = _CONTRACTIONS + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
QWEN35 = (_CONTRACTIONS + r"|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+"
          r"|\s+(?!\S)|\s+")
SEED_CODER = _CONTRACTIONS + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1}| ?[^\s\p{L}\p{N}\r\n]+|\s*[\r\n]+|\s+(?!\S)|\s+"
_UPPER, _LOWER = r"[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]", r"[\p{Ll}\p{Lm}\p{Lo}\p{M}]"
TEKKEN = (rf"[^\r\n\p{{L}}\p{{N}}]?{_UPPER}*{_LOWER}+|[^\r\n\p{{L}}\p{{N}}]?{_UPPER}+{_LOWER}*|\p{{N}}"
          r"| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+")
GPT4O = (rf"[^\r\n\p{{L}}\p{{N}}]?{_UPPER}*{_LOWER}+{_CONTRACTIONS}?"
         rf"|[^\r\n\p{{L}}\p{{N}}]?{_UPPER}+{_LOWER}*{_CONTRACTIONS}?"
         r"|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+")
DEEPSEEK3 = (r"[!\"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+"
             r"| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
BLOOM = " ?[^(\\s|.,!?\u2026\u3002\uff0c\u3001\u0964\u06d4\u060c)]+"
CJK = "[\u4e00-\u9fa5\u0800-\u4e00\uac00-\ud7ff]+"
HAN_KANA = "[\u4e00-\u9fa5\u3040-\u309f\u30a0-\u30ff]+"


@dataclasses.dataclass(frozen=True)
class PreType:
    """How llama.cpp pre-tokenizes one family of byte-level BPE vocabularies."""

    splits: tuple[str, ...]  # regexes applied in turn, each splitting the pieces of the one before
    ignore_merges: bool = False  # a piece that is a whole token is taken as it is
    add_bos: bool = False  # llama.cpp's add_bos when the file does not say


PRE_GROUPS = [
    (PreType((r"[\p{P}\$\+<=>\^~\|]+", GPT2, r"\p{N}+", "[0-9][0-9][0-9]")), ["default"]),
    (PreType((GPT2,)), ["gpt-2", "phi-2", "jina-es", "jina-de", "gigachat", "jina-v2-es", "jina-v2-de", "a.x-4.0",
                        "mellum", "modern-bert", "jina-v1-en", "jina-v2-code", "roberta-bpe", "exaone4", "mpt", "olmo",
                        "jais", "trillion", "granite-docling"]),
    (PreType((r"\p{N}", GPT2)), ["starcoder", "refact", "command-r", "smollm", "codeshell", "exaone", "minerva-7b",
                                 "mellum2"]),
    (PreType((LLAMA3,), ignore_merges=True, add_bos=True), ["llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1",
                                                            "pixtral", "midm-2.0", "lfm2", "jina-v5-nano"]),
    (PreType((LLAMA3,)), ["dbrx", "smaug-bpe", "glm4", "chatglm-bpe"]),
    (PreType((QWEN2,)), ["qwen2", "deepseek-r1-qwen", "kormo", "f2llmv2", "megrez", "stablelm2", "hunyuan",
                         "solar-open", "grok-2"]),
    (PreType((QWEN35,)), ["qwen35"]),
    (PreType((SEED_CODER,)), ["seed-coder"]),
    (PreType((TEKKEN,), ignore_merges=True, add_bos=True), ["tekken"]),
    (PreType((GPT4O,)), ["gpt-4o", "llama4", "kanana2", "talkie", "minimax-m2"]),
    (PreType((r"\p{N}{1,3}", HAN_KANA, DEEPSEEK3)), ["deepseek-v3", "hunyuan-dense", "joyai-llm", "hy_v4"]),
    (PreType((r"[\r\n]", r"\s?\p{L}+", r"\s?\p{P}+", CJK, r"\p{N}")), ["deepseek-coder"]),
    (PreType((r"[\p{P}\$\+<=>\^~\|`]+", GPT2, "[0-9][0-9][0-9]")), ["falcon"]),
    (PreType((BLOOM,)), ["poro-chat", "bloom", "gpt3-finnish"]),
    (PreType((BLOOM, r"\p{N}")), ["viking"]),
]
PRE_TYPES = {name: pre for pre, names in PRE_GROUPS for name in names}


# --- what the file says ------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class GGUFVocab:
    """The tokenizer metadata of one GGUF file."""

    path: str
    fields: dict
    tokens: list[str]
    types: list[int]

    @property
    def model(self) -> str | None:
        return self.fields.get("tokenizer.ggml.model")

    @property
    def arch(self) -> str | None:
        return self.fields.get("general.architecture")

    def get(self, key: str, default=None):
        """``tokenizer.ggml.{key}``."""
        return self.fields.get(f"tokenizer.ggml.{key}", default)

    def context_length(self, default: int) -> int:
        return int(self.fields.get(f"{self.arch}.context_length", default))

    def special_ids(self, defaults: dict | None = None) -> dict[str, int]:
        """bos/eos/unk/pad token -> id, for the ids the file sets (else ``defaults``) inside the vocabulary."""
        ids = dict(defaults or {})
        ids.update({name: int(self.get(key)) for name, key in SPECIAL_IDS.items() if self.get(key) is not None})
        return {name: i for name, i in ids.items() if 0 <= i < len(self.tokens)}


def read_vocab(path: str) -> GGUFVocab:
    """The tokenizer metadata of a GGUF file; a CheckpointError if it holds no vocabulary."""
    fields, _ = read_header(path, strings=STRING_KEYS)
    tokens = fields.get("tokenizer.ggml.tokens")
    if not tokens:
        raise CheckpointError(f"GGUF file '{path}' holds no vocabulary (tokenizer.ggml.tokens): load it with "
                              f"tokenizer=False, or {HOW_TO_FALL_BACK}")
    types = [int(t) for t in fields.get("tokenizer.ggml.token_type", [])]
    return GGUFVocab(path, fields, list(tokens), types + [int(TokenType.NORMAL)] * (len(tokens) - len(types)))


def build_gguf_tokenizer(path: str):
    """The tokenizer a GGUF file describes, as a transformers PreTrainedTokenizerFast."""
    vocab = read_vocab(path)
    if vocab.model == "gpt2":
        return byte_level_tokenizer(vocab)
    if vocab.model == "llama":
        return sentencepiece_tokenizer(vocab)
    if vocab.model == "bert":
        return wordpiece_tokenizer(vocab)
    raise CheckpointError(
        f"GGUF file '{path}' has a tokenizer of kind '{vocab.model}' (tokenizer.ggml.model), which lmprobe does "
        f"not rebuild (it knows gpt2, llama and bert): {HOW_TO_FALL_BACK}, or load it with tokenizer=False")


# --- byte-level BPE (tokenizer.ggml.model == "gpt2") ----------------------------------------------------


def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's printable spelling of each byte."""
    keep = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    spelled = {b: chr(b) for b in keep}
    extra = (b for b in range(256) if b not in spelled)
    return {**spelled, **{b: chr(256 + n) for n, b in enumerate(extra)}}


BYTE_SPELLING = bytes_to_unicode()
BYTE_ALPHABET = frozenset(BYTE_SPELLING.values())


def byte_spelled(token: str) -> bool:
    return set(token) <= BYTE_ALPHABET


def pre_type(vocab: GGUFVocab) -> PreType:
    """The file's pre-tokenizer; a missing one is llama.cpp's default (with its warning), an unknown one an error."""
    name = vocab.get("pre")
    if name is None:
        log.warning("GGUF file '%s' names no pre-tokenizer (tokenizer.ggml.pre): splitting text with llama.cpp's "
                    "default regexes, as llama.cpp does; re-convert the model for its own", vocab.path)
        name = "default"
    if name not in PRE_TYPES:
        raise CheckpointError(
            f"GGUF file '{vocab.path}' uses pre-tokenizer '{name}' (tokenizer.ggml.pre), which lmprobe does not "
            f"know (PRE_TYPES in {__name__}): {HOW_TO_FALL_BACK}, or load it with tokenizer=False")
    return PRE_TYPES[name]


def byte_level_tokenizer(vocab: GGUFVocab):
    """Byte-level BPE: tokens in GPT-2's byte spelling, the file's merges, llama.cpp's split regexes."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers

    pre = pre_type(vocab)
    spelled = [t if byte_spelled(t) else "".join(BYTE_SPELLING[b] for b in t.encode()) for t in vocab.tokens]
    model = models.BPE({t: i for i, t in enumerate(spelled)}, file_merges(vocab), dropout=None,
                       continuing_subword_prefix="", end_of_word_suffix="", fuse_unk=False,
                       ignore_merges=pre.ignore_merges)
    backend = Tokenizer(model)
    splits = [pre_tokenizers.Split(Regex(r), behavior="isolated") for r in pre.splits]
    backend.pre_tokenizer = pre_tokenizers.Sequence([*splits, pre_tokenizers.ByteLevel(add_prefix_space=False,
                                                                                          use_regex=False)])
    backend.decoder = decoders.ByteLevel()
    # a CONTROL token outside the byte alphabet is a converter's mislabel: not matched whole (as transformers)
    control = [t for t, kind in zip(vocab.tokens, vocab.types) if kind == TokenType.CONTROL and byte_spelled(t)]
    return finish(vocab, backend, spelled, control, add_bos=vocab.get("add_bos_token", pre.add_bos))


def file_merges(vocab: GGUFVocab) -> list[tuple[str, str]]:
    """tokenizer.ggml.merges as pairs, split at the first space after the first character (as llama.cpp)."""
    merges = vocab.get("merges")
    if merges is None:
        raise CheckpointError(f"GGUF file '{vocab.path}' has a BPE vocabulary without merges "
                              f"(tokenizer.ggml.merges): re-convert it, or {HOW_TO_FALL_BACK}")
    pairs = []
    for merge in merges:
        cut = merge.find(" ", 1)
        pairs.append((merge[:cut], merge[cut + 1:]) if cut > 0 else (merge, ""))
    return pairs


# --- SentencePiece BPE (tokenizer.ggml.model == "llama") ----------------------------------------------


def sentencepiece_tokenizer(vocab: GGUFVocab):
    """SentencePiece BPE with byte fallback, the space prefix per ``add_space_prefix`` (default true)."""
    from tokenizers import Tokenizer, models

    gemma = vocab.arch in GEMMA_ARCHS
    tokens = gemma_spelling(vocab.tokens) if gemma else vocab.tokens
    specials = vocab.special_ids(SPM_DEFAULT_IDS)
    unk = tokens[specials["unk_token"]] if "unk_token" in specials else None
    backend = Tokenizer(models.BPE({t: i for i, t in enumerate(tokens)}, sentencepiece_merges(vocab, tokens, gemma),
                                   unk_token=unk, fuse_unk=True, byte_fallback=True, dropout=None))
    backend.normalizer, backend.decoder = space_steps(bool(vocab.get("add_space_prefix", True)))
    control = [t for t, kind in zip(tokens, vocab.types) if kind == TokenType.CONTROL]
    extra = {"mask_token": "<mask>"} if gemma and "<mask>" in control else {}  # as transformers' GemmaTokenizer
    return finish(vocab, backend, tokens, control, add_bos=vocab.get("add_bos_token", True), defaults=SPM_DEFAULT_IDS,
                  **extra)


def sentencepiece_merges(vocab: GGUFVocab, tokens: list[str], gemma: bool) -> list[tuple[str, str]]:
    """The file's merges, else merges rebuilt from the scores; for Gemma from the order of the tokens in the
    file, which its merges follow and its scores do not."""
    if vocab.get("merges") is not None:
        return file_merges(vocab)
    scores = [-float(i) for i in range(len(tokens))] if gemma else [float(s) for s in vocab.get("scores", [])]
    if len(scores) != len(tokens):
        raise CheckpointError(f"GGUF file '{vocab.path}' has a SentencePiece vocabulary without merges or scores "
                              f"(tokenizer.ggml.scores): re-convert it, or {HOW_TO_FALL_BACK}")
    return merges_from_scores(tokens, scores)


def space_steps(prefix: bool):
    """(normalizer, decoder) for SentencePiece's spaces. llama.cpp prefixes each text fragment (the text,
    and the text after each special token) with a space when ``prefix``, even one that starts with a
    space; a Prepend normalizer does the same per fragment (transformers' Metaspace "first" does not)."""
    from tokenizers import decoders, normalizers

    replace = normalizers.Replace(" ", SPACE)
    steps = [decoders.Replace(SPACE, " "), decoders.ByteFallback(), decoders.Fuse()]
    if not prefix:
        return replace, decoders.Sequence(steps)
    return (normalizers.Sequence([normalizers.Prepend(SPACE), replace]),
            decoders.Sequence([*steps, decoders.Strip(" ", 1, 0)]))


def gemma_spelling(tokens: list[str]) -> list[str]:
    """Gemma files store the tokens of 2+ spaces as spaces; its vocabulary spells them with U+2581."""
    return [SPACE * len(t) if " " in t and not t.strip() else t for t in tokens]


def merges_from_scores(tokens: list[str], scores: list[float]) -> list[tuple[str, str]]:
    """BPE merges equivalent to SentencePiece's score order: every split of a token into two tokens,
    best score first, then longer left and right parts (transformers' generate_merges, same order)."""
    ids = {t: i for i, t in enumerate(tokens)}
    found = []
    for token, score in dict(zip(tokens, scores)).items():
        pairs = [(token[:k], token[k:]) for k in range(1, len(token)) if token[:k] in ids and token[k:] in ids]
        pairs.sort(key=lambda p: (ids[p[0]], ids[p[1]]))
        found.extend((left, right, score) for left, right in pairs)
    found.sort(key=lambda m: (-m[2], -len(m[0]), -len(m[1])))
    return [(left, right) for left, right, _ in found]


# --- WordPiece (tokenizer.ggml.model == "bert") ---------------------------------------------------------

BERT_SPECIALS = {"unk_token": "[UNK]", "sep_token": "[SEP]", "pad_token": "[PAD]", "cls_token": "[CLS]",
                 "mask_token": "[MASK]"}


def wordpiece_tokenizer(vocab: GGUFVocab):
    """BERT's WordPiece pipeline from llama.cpp's "phantom space" vocabulary.

    llama.cpp's converter (BertModel.set_vocab) writes WordPiece tokens in phantom-space form: a
    word-initial token gets a leading U+2581, a continuation token loses its "##", control tokens
    ([CLS], [SEP], ...) stay as they are. This undoes that and rebuilds BERT's pipeline (BERT
    normalizer, pre-tokenizer, [CLS] A [SEP] template). Lower-casing is not recorded in GGUF: it is
    on when no ordinary token holds an upper-case letter (an uncased vocabulary).
    """
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    ids, ordinary = {}, []
    for i, (token, kind) in enumerate(zip(vocab.tokens, vocab.types)):
        if kind != TokenType.CONTROL:
            token = token[1:] if token.startswith(SPACE) else "##" + token
            ordinary.append(token)
        ids.setdefault(token, i)
    missing = [t for t in ("[UNK]", "[CLS]", "[SEP]") if t not in ids]
    if missing:
        raise CheckpointError(f"GGUF file '{vocab.path}' has a BERT vocabulary without {', '.join(missing)}: lmprobe "
                              f"cannot rebuild its tokenizer; {HOW_TO_FALL_BACK}")
    lowercase = not any(t != t.lower() for t in ordinary)
    backend = Tokenizer(models.WordPiece(ids, unk_token="[UNK]", max_input_chars_per_word=100))
    backend.normalizer = normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=True, strip_accents=None,
                                                    lowercase=lowercase)
    backend.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    backend.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", ids["[CLS]"]), ("[SEP]", ids["[SEP]"])])
    backend.decoder = decoders.WordPiece(prefix="##")
    return PreTrainedTokenizerFast(
        tokenizer_object=backend, **{k: v for k, v in BERT_SPECIALS.items() if v in ids},
        model_max_length=vocab.context_length(512), do_lower_case=lowercase,
        model_input_names=["input_ids", "token_type_ids", "attention_mask"])


# --- shared: added tokens, BOS/EOS template, the transformers wrapper ------------------------------------


def add_file_tokens(backend, vocab: GGUFVocab, spelled: list[str], control: list[str]) -> None:
    """CONTROL tokens as special added tokens, USER_DEFINED ones (spelled as in the vocabulary) as
    plain added tokens: each is matched whole in the text, before the model runs (as transformers)."""
    from tokenizers import AddedToken

    backend.add_special_tokens([AddedToken(t, normalized=False, special=True) for t in control])
    known = set(spelled)
    user = [t for t, kind in zip(vocab.tokens, vocab.types) if kind == TokenType.USER_DEFINED and t in known]
    backend.add_tokens([AddedToken(t, normalized=False, special=False) for t in user])


def bos_eos_template(bos: tuple[str, int] | None, eos: tuple[str, int] | None):
    """transformers' template: [BOS] A [EOS], and [BOS] A [EOS] [BOS] B [EOS] for pairs."""
    from tokenizers import processors

    head, tail = (f"{bos[0]}:0 " if bos else ""), (f" {eos[0]}:0" if eos else "")
    single = f"{head}$A:0{tail}"
    pair = f"{single}{' ' + bos[0] + ':1' if bos else ''} $B:1{' ' + eos[0] + ':1' if eos else ''}"
    return processors.TemplateProcessing(single=single, pair=pair, special_tokens=[t for t in (bos, eos) if t])


def finish(vocab: GGUFVocab, backend, spelled: list[str], control: list[str], *, add_bos, defaults=None, **extra):
    """Added tokens, the BOS/EOS post-processor and transformers' wrapper with the file's special tokens,
    context length and chat template."""
    from transformers import PreTrainedTokenizerFast

    add_file_tokens(backend, vocab, spelled, control)
    ids = vocab.special_ids(defaults)
    specials = {name: spelled[i] for name, i in ids.items()}
    add_bos = bool(add_bos) and "bos_token" in ids
    add_eos = bool(vocab.get("add_eos_token", False)) and "eos_token" in ids
    bos = (specials["bos_token"], ids["bos_token"]) if add_bos else None
    eos = (specials["eos_token"], ids["eos_token"]) if add_eos else None
    backend.post_processor = bos_eos_template(bos, eos)
    template = vocab.fields.get("tokenizer.chat_template")
    return PreTrainedTokenizerFast(
        tokenizer_object=backend, **specials, **extra, add_bos_token=add_bos, add_eos_token=add_eos,
        model_max_length=vocab.context_length(2048), clean_up_tokenization_spaces=False,
        **({"chat_template": template} if template else {}))
