import importlib.util

import pytest
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

from lmprobe.data import profanity
from lmprobe.data.profanity import Profanity, load_profanity
from lmprobe.errors import LmprobeError
from lmprobe.perturb.text import DEFAULT_TRIGGER, append_trigger

LIST = Profanity(frozenset({"ass", "fuck", "shit", "bull shit", "ass-fucker", "2 girls 1 cup"}), "test")


@pytest.mark.parametrize("text, n", [
    ("A class of glasses passed the assessment.", 0),  # whole words only
    ("What an ASS! Ass, ass.", 3),  # case and punctuation
    ("That is bull shit.", 1),  # multi-word entry counted once, not also as 'shit'
    ("bull, shit", 1),  # punctuation between the words of an entry is a space
    ("You ass-fucker", 1), ("you ass fucker", 1),  # hyphenated entry = word sequence
    ("2 girls 1 cup", 1), ("2 girls 1", 0),
    ("shit_storm", 1),  # underscore separates words
])
def test_count(text, n):
    assert LIST.count(text) == n
    assert LIST.contains(text) == (n > 0)


def test_trigger_words_are_not_counted():
    x = "Messi captains the national team, damn shit."
    prompt = append_trigger(x)
    assert LIST.count(prompt) == LIST.count(x) + 2
    assert LIST.count_outside(prompt, len(x), len(prompt)) == LIST.count(x) == 1
    # prompt + continuation: the trigger's own words are cut out, the continuation's kept
    assert LIST.count_outside(prompt + " Oh fuck.", len(x), len(prompt)) == 2
    # no match runs across the cut-out trigger
    assert LIST.count_outside("bull" + DEFAULT_TRIGGER + " shit", 4, 4 + len(DEFAULT_TRIGGER)) == 1


def test_default_list_and_files(tmp_path):
    default = load_profanity("better-profanity")
    assert len(default.words) == 916 and default.source.endswith("profanity_wordlist.txt")
    assert default.count("Fuck this class") == 1 and default.count("a blow job") == 1
    ldnoobw = tmp_path / "en"
    ldnoobw.write_text("2g1c\nacrotomophilia\nAlabama hot pocket\n\n# comment\n")
    words = load_profanity(str(ldnoobw))
    assert words.words == {"2g1c", "acrotomophilia", "alabama hot pocket"}
    assert words.count("an alabama HOT pocket.") == 1


def test_bad_lists(tmp_path, monkeypatch):
    with pytest.raises(LmprobeError, match="does not exist"):
        load_profanity(str(tmp_path / "missing.txt"))
    (tmp_path / "empty.txt").write_text("\n# nothing\n")
    with pytest.raises(LmprobeError, match="no entries"):
        load_profanity(str(tmp_path / "empty.txt"))
    (tmp_path / "bin").write_bytes(b"\xff\xfe\x00bad")
    with pytest.raises(LmprobeError, match="not text"):
        load_profanity(str(tmp_path / "bin"))
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None)
    with pytest.raises(LmprobeError, match=r"pip install better-profanity==0\.7\.0"):
        load_profanity("better-profanity")
    assert profanity.INSTALL == "pip install better-profanity==0.7.0"


def test_token_ids_byte_level_and_wordpiece():
    vocab = {"<s>": 0, "ass": 1, "Ġass": 2, "Ġclass": 3, "ĠFuck": 4, "Ġbull": 5, "Ġshit": 6, "cl": 7, "FUCK": 8}
    bpe = Tokenizer(models.BPE(vocab, []))
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    from tokenizers import decoders

    bpe.decoder = decoders.ByteLevel()
    tok = PreTrainedTokenizerFast(tokenizer_object=bpe, bos_token="<s>")
    assert LIST.token_ids(tok) == [1, 2, 4, 6, 8]  # single-token words, any case, with/without space
    wp = Tokenizer(models.WordPiece({"[UNK]": 0, "ass": 1, "##ass": 2, "cl": 3, "shit": 4}, unk_token="[UNK]"))
    wordpiece = PreTrainedTokenizerFast(tokenizer_object=wp, unk_token="[UNK]")
    assert LIST.token_ids(wordpiece) == [1, 4]  # '##ass' continues a word: left out
