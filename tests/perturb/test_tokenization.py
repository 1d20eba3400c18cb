import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tokenizers import (
    Tokenizer,
    decoders,
    models,
    normalizers,
    pre_tokenizers,
    processors,
    trainers,
)
from transformers import PreTrainedTokenizerFast

from lmprobe.errors import LmprobeError
from lmprobe.perturb.tokenization import chop, chopped_ids

TABLE2 = ("Media.Vision would return to the franchise with the development of Valkyria: Azure "
          "Revolution for the PlayStation 4.")
CORPUS = [TABLE2, "The quick brown fox jumps over the lazy dog.", "April is the fourth month.",
          "Lionel Messi captains the Argentina national team!"] * 20
ASCII_TEXT = st.text(st.characters(min_codepoint=32, max_codepoint=126), min_size=1, max_size=80)


@pytest.fixture(scope="module")
def smollm2():
    from lmprobe.checkpoints.resolve import resolve

    return resolve("smollm2-135m").tokenizer()


def _byte_bpe(prefix_space: bool) -> PreTrainedTokenizerFast:
    """A GPT-2-style byte-level BPE with BOS/EOS added around every text."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=prefix_space)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(CORPUS, trainers.BpeTrainer(
        vocab_size=400, special_tokens=["<s>", "</s>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A </s>", special_tokens=[("<s>", 0), ("</s>", 1)])
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>")


def _sentencepiece_like() -> PreTrainedTokenizerFast:
    """Llama-1/2 style: Prepend("▁") normalizer, byte fallback, BOS added."""
    tok = Tokenizer(models.BPE(byte_fallback=True))
    tok.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    tok.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(),
                                     decoders.Strip(" ", 1, 0)])
    tok.train_from_iterator(CORPUS, trainers.BpeTrainer(
        vocab_size=400, special_tokens=["<s>"], initial_alphabet=[chr(c) for c in range(32, 127)] + ["▁"]))
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 0)])
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>")


def test_chop():
    assert chop("abcdefg", 3) == ["abc", "def", "g"]
    assert "".join(chop(TABLE2, 5)) == TABLE2 and chop("", 5) == []
    with pytest.raises(ValueError):
        chop("abc", 0)


def test_paper_table2_on_smollm2(smollm2):
    ids = chopped_ids(smollm2, TABLE2, k=10)
    assert smollm2.decode(ids, skip_special_tokens=True) == TABLE2
    assert ids != smollm2(TABLE2)["input_ids"]  # a different tokenization of the same text
    tokens = smollm2.convert_ids_to_tokens(ids)
    assert tokens[:5] == ["Media", ".", "Vis", "i", "on"]  # Table 2: "Media.Visi–on would r–eturn"
    assert "Ġr" in tokens and "et" in tokens  # " r" | "eturn": no space added to "eturn"


@settings(max_examples=60, deadline=None)
@given(text=ASCII_TEXT, k=st.integers(1, 12))
def test_smollm2_chopped_decodes_to_text(smollm2, text, k):
    assert smollm2.decode(chopped_ids(smollm2, text, k), skip_special_tokens=True) == text


@pytest.mark.parametrize("prefix_space", [False, True])
def test_byte_level_bpe_keeps_text_and_frame(prefix_space):
    tok = _byte_bpe(prefix_space)
    normal = tok(TABLE2)["input_ids"]
    ids = chopped_ids(tok, TABLE2, 5)
    assert ids[0] == 0 and ids[-1] == 1 and normal[0] == 0 and normal[-1] == 1
    assert tok.decode(ids, skip_special_tokens=True) == tok.decode(normal, skip_special_tokens=True)
    spaces = sum(t.startswith("Ġ") for t in tok.convert_ids_to_tokens(ids))
    assert spaces == TABLE2.count(" ") + prefix_space  # no space invented at piece starts


@settings(max_examples=40, deadline=None)
@given(text=ASCII_TEXT, k=st.integers(1, 12))
def test_byte_level_bpe_property(text, k):
    tok = _BPE
    assert tok.decode(chopped_ids(tok, text, k), skip_special_tokens=True) == text


_BPE = _byte_bpe(False)


def test_sentencepiece_prefix_only_at_start():
    tok = _sentencepiece_like()
    text = "April is the fourth month."
    ids = chopped_ids(tok, text, 5)
    assert ids[0] == 0
    assert tok.decode(ids, skip_special_tokens=True) == text
    assert sum(t.count("▁") for t in tok.convert_ids_to_tokens(ids)) == text.count(" ") + 1


def test_wordpiece_refused():
    tok = Tokenizer(models.WordPiece({"[UNK]": 0, "media": 1, "##vis": 2, "on": 3, "##on": 4}, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    with pytest.raises(LmprobeError, match="WordPiece"):
        chopped_ids(PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]"), "mediavision", 5)


def test_empty_text_refused(smollm2):
    with pytest.raises(LmprobeError, match="empty"):
        chopped_ids(smollm2, "", 5)
