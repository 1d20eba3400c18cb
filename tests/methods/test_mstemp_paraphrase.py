"""Cleaning evaluator outputs and building paraphrase prompts."""

from lmprobe.methods.mstemp import paraphrase

SEED = "The movie was great."


def test_clean_strips_prefixes_quotes_and_extra_lines():
    assert paraphrase.clean('Paraphrase: "The film was excellent."\nMore text', SEED) == "The film was excellent."
    assert paraphrase.clean("Here is the rewritten sentence:\n\n'A truly great film.'", SEED) == "A truly great film."
    assert paraphrase.clean("1. The picture was superb.", SEED) == "The picture was superb."
    assert paraphrase.clean("Rewritten sentence: I enjoyed the film.", SEED) == "I enjoyed the film."


def test_clean_drops_empty_short_and_copies():
    for bad in ("", "   \n ", "Paraphrase:", "Great.", "the MOVIE was great", '"The movie was great!"'):
        assert paraphrase.clean(bad, SEED) is None, bad


def test_clean_all_removes_duplicates_in_order():
    outputs = ["The film was great.", "the film was great", "Great movie, really.", "The movie was great."]
    assert paraphrase.clean_all(outputs, SEED) == ["The film was great.", "Great movie, really."]


class _Chat:
    chat_template = "x"

    def apply_chat_template(self, messages, tokenize, add_generation_prompt):
        assert not tokenize and add_generation_prompt
        return f"<user>{messages[0]['content']}</user><assistant>"


def test_prompt_uses_chat_template_when_there_is_one():
    chat = paraphrase.build_prompt(_Chat(), SEED)
    assert chat.startswith("<user>") and chat.endswith("<assistant>") and SEED in chat
    plain = paraphrase.build_prompt(object(), SEED)
    assert plain.endswith(f"Sentence: {SEED}\nParaphrase:")
