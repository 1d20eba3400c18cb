"""MSTemp end to end: the filter on a real encoder, labels and determinism of the generated set,
bad input, and the front end on a tiny random Llama whose vocabulary is English words."""

import json
import re

import numpy as np
import pytest
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

from lmprobe.cli import mstemp as front_end
from lmprobe.data.labelled import LabelledData
from lmprobe.errors import LmprobeError
from lmprobe.methods import mstemp
from lmprobe.methods.mstemp import filter as semantic_filter
from tests.models.parity import save_random

SEEDS = ["John bought a wooden table in the market.", "The actors wasted a boring evening in the theatre.",
         "Mary loved the little garden near the house.", "The car broke down on a terrible road."]
PARAPHRASES = {  # what the fake evaluator answers, per seed
    SEEDS[0]: ["John purchased a wooden table at the market.", "At the market John bought a wooden table."],
    SEEDS[1]: ["The actors wasted a boring evening at the theatre.", "Bananas are yellow."],
    SEEDS[2]: ["Mary loved the little garden next to the house.", "Mary loved the little garden near the house."],
    SEEDS[3]: ["The car broke down on a terrible road.", "The car broke down on a terrible road!"],  # copies only
}
DATA = LabelledData(SEEDS, np.array([1, 0, 1, 0]), ("negative", "positive"), "hand-written")


class _Tokenizer:
    chat_template = None

    def decode(self, ids, skip_special_tokens=True):
        return ids


class FakeEvaluator:
    """Answers each paraphrase prompt with the next canned paraphrase of its seed."""

    tokenizer = _Tokenizer()
    is_decoder = True

    def generate(self, prompts, **kwargs):
        out, seen = [], {}
        for p in prompts:
            seed = re.search(r"Sentence: (.*)\nParaphrase:", p).group(1)
            k = seen[seed] = seen.get(seed, -1) + 1
            out.append(PARAPHRASES[seed][k % len(PARAPHRASES[seed])])
        return out


class BagOfWords:
    """An encoder: counts of lower-cased words over a fixed vocabulary (cosine = word overlap)."""

    is_decoder = False
    truncated = 0

    def embed(self, texts, pooling="mean"):
        vocab = sorted({w for t in [*SEEDS, *sum(PARAPHRASES.values(), [])] for w in re.findall(r"\w+", t.lower())})
        out = np.zeros((len(texts), len(vocab) + 1))
        for i, t in enumerate(texts):
            for w in re.findall(r"\w+", t.lower()):
                out[i, vocab.index(w) if w in vocab else -1] += 1
        return out


CONFIG = mstemp.Config(n_templates=2, m_samples=3, tau=0.8, tagger="wordnet", repeats=5)


def _generate(config=CONFIG):
    return mstemp.generate_samples(FakeEvaluator(), BagOfWords(), DATA, config, name="fake")


def test_filter_keeps_a_paraphrase_and_drops_an_unrelated_sentence():
    from lmprobe.engine import Scorer

    encoder = Scorer.load(semantic_filter.DEFAULT_FILTER)
    seed = "I loved this movie"
    candidates = ["The train leaves at noon from platform four.", "I adored this film"]
    scores = semantic_filter.similarities(encoder, [seed], [candidates])[0]
    assert scores[1] > 0.7 > 0.2 > scores[0]
    assert semantic_filter.keep(candidates, scores, tau=0.7) == [("I adored this film", pytest.approx(scores[1]))]


def test_generated_samples_inherit_their_seed_label_and_are_counted():
    rows, counts = _generate()
    assert rows and all(r["label"] == DATA.labels[r["seed_index"]] and r["seed"] == SEEDS[r["seed_index"]]
                        for r in rows)
    assert {r["seed_index"] for r in rows} == {0, 1, 2}
    assert all(r["similarity"] >= CONFIG.tau for r in rows)
    assert not any(r["paraphrase"] == "Bananas are yellow." for r in rows)  # filtered out
    assert counts["seeds_without_paraphrase"] == 1  # seed 3: the evaluator only copied it
    assert counts["seeds_without_template"] == 1 and counts["samples"] == len(rows)
    assert all("[x]" in r["template"] and r["sample"] != r["paraphrase"] for r in rows)


def test_same_seed_same_generated_set():
    first, _ = _generate()
    assert first == _generate()[0]
    other = _generate(mstemp.Config(**{**CONFIG.__dict__, "seed": 1}))[0]
    assert [r["sample"] for r in other] != [r["sample"] for r in first]


def test_random_typo_attack_changes_samples_but_not_labels():
    clean, _ = _generate()
    attacked, _ = _generate(mstemp.Config(**{**CONFIG.__dict__, "attack": "random-typo", "attack_strength": 2}))
    assert len(attacked) == len(clean)
    assert [r["label"] for r in attacked] == [r["label"] for r in clean]
    assert [r["unattacked"] for r in attacked] == [r["sample"] for r in clean]
    assert sum(a["sample"] != c["sample"] for a, c in zip(attacked, clean)) >= len(clean) // 2
    # 'typo' (the name before the greedy attacks, in README) is the same random attack
    assert _generate(mstemp.Config(**{**CONFIG.__dict__, "attack": "typo", "attack_strength": 2}))[0] == attacked


def test_bad_input_is_refused_before_any_model():
    with pytest.raises(LmprobeError, match="one class only"):
        mstemp.check_data(LabelledData(SEEDS, np.zeros(4, np.int64), ("negative", "positive"), "one-class"))
    with pytest.raises(LmprobeError, match="empty"):
        mstemp.check_data(LabelledData([], np.zeros(0, np.int64), ("a", "b"), "nothing"))
    with pytest.raises(LmprobeError, match="unknown attack"):
        mstemp.Config(attack="emoji").check()
    for name in ("greedy-typo", "greedy-synonym", "random-typo", "random-synonym", "typo", "synonym"):
        mstemp.Config(attack=name).check()


WORDS = ("the a an of in on to and was is were it this that very . , ! ? : movie film story actor actors "
         "table chair garden house car road market theatre evening morning night day friend friends book "
         "music song man woman child dog cat city river tree window door wooden little big old new John Mary "
         "Paris bought loved hated wasted broke saw made liked great good bad boring terrible wonderful "
         "negative positive Sentence Paraphrase Rewrite following sentence different words keeping its "
         "meaning Try style or expression Reply with rewritten only Classify sentiment text as one Text Answer").split()


@pytest.fixture(scope="module")
def english_llama(tmp_path_factory):
    path = tmp_path_factory.mktemp("mstemp_llama")
    vocab = {"<pad>": 0, "<s>": 1, "</s>": 2, **{w: i + 3 for i, w in enumerate(dict.fromkeys(WORDS))}}
    save_random(LlamaForCausalLM, LlamaConfig(
        vocab_size=len(vocab), hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=128), path)
    words = Tokenizer(models.WordLevel(vocab, unk_token="<pad>"))
    words.pre_tokenizer = pre_tokenizers.Whitespace()
    from tokenizers import decoders
    words.decoder = decoders.WordPiece(prefix="##")  # joins words with spaces
    PreTrainedTokenizerFast(tokenizer_object=words, pad_token="<pad>", bos_token="<s>",
                            eos_token="</s>").save_pretrained(path)
    return str(path)


def seeds_csv(tmp_path, first: str):
    """Four labelled seeds (``first`` the positive one about John) as a CSV file."""
    data = tmp_path / "seeds.csv"
    data.write_text("text,label\n" + "\n".join(
        f'"{t}",{y}' for t, y in [(first, "positive"), ("the movie was a boring story .", "negative"),
                                  ("Mary saw a wonderful film in Paris .", "positive"),
                                  ("the actors wasted a terrible evening .", "negative")]) + "\n")
    return data


def test_front_end_end_to_end_and_rerun_resumes(english_llama, tmp_path, capsys):
    data = seeds_csv(tmp_path, "John loved the old house near the river .")
    out = tmp_path / "run"
    argv = [f"--model={english_llama}", f"--evaluator={english_llama}", f"--filter={english_llama}",
            f"--dataset={data}", "--n_templates=3", "--m_samples=2", "--tau=-1", "--max_new_tokens=8",
            "--tagger=wordnet", f"--output_dir={out}", "--batch_size=8"]
    front_end.main(argv)
    result = json.loads((out / "results.json").read_text())
    for key in ("baseline_accuracy", "generated_accuracy", "drop", "n_seed", "n_generated", "per_evaluator"):
        assert key in result
    assert result["method"] == "mstemp" and result["n_seed"] == 4 and result["label_names"] == ["negative", "positive"]
    assert result["per_evaluator"][english_llama]["candidates"] == 12
    rows = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]
    assert len(rows) == result["n_generated"] > 0 and np.isfinite(result["generated_accuracy"])
    for r in rows:
        assert {"seed", "paraphrase", "similarity", "template", "sample", "label"} <= set(r)
    assert result["fair_drop"] == pytest.approx(result["fair_baseline_accuracy"] - result["fair_generated_accuracy"])
    printed = capsys.readouterr().out
    assert "baseline accuracy" in printed and printed.index("fair (the") < printed.index("all seeds (selection-biased")
    cached = sorted(p.name for p in (out / "cache").iterdir())
    assert cached
    front_end.main(argv)  # resumes from the cached paraphrases: same samples
    assert [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()] == rows
    assert sorted(p.name for p in (out / "cache").iterdir()) == cached


def test_front_end_without_a_generated_sample_exits_2_and_prints_no_nan(english_llama, tmp_path, capsys):
    data = seeds_csv(tmp_path, "John loved the old house near the river .")
    out = tmp_path / "run"
    with pytest.raises(SystemExit) as stop:  # tau = 1: no paraphrase is kept, so there is no accuracy drop
        front_end.main([f"--model={english_llama}", f"--evaluator={english_llama}", f"--filter={english_llama}",
                        f"--dataset={data}", "--n_templates=1", "--tau=1", "--max_new_tokens=4", "--tagger=wordnet",
                        "--batch_size=8", f"--output_dir={out}"])
    captured = capsys.readouterr()
    assert stop.value.code == 2 and captured.err.splitlines()[-1].startswith("error: no evaluator gave a generated")
    assert json.loads((out / "results.json").read_text())["n_generated"] == 0
    assert "nan" not in captured.out and "drop n/a (n/a)" in captured.out and "on 4 seeds" in captured.out


def test_front_end_greedy_attack_flips_only_what_it_reports(english_llama, tmp_path, capsys):
    """The greedy attack on a real (random) decoder target through SCoPE's search: a sample is
    edited exactly when the reported prediction is then wrong, and untouched samples keep their
    clean prediction."""
    data = seeds_csv(tmp_path, "John loved the wonderful house near the river .")
    common = [f"--model={english_llama}", f"--evaluator={english_llama}", f"--filter={english_llama}",
              f"--dataset={data}", "--n_templates=2", "--m_samples=2", "--tau=-1", "--max_new_tokens=8",
              "--tagger=wordnet", "--batch_size=8", "--attack_strength=2"]
    front_end.main([*common, f"--output_dir={tmp_path / 'clean'}"])
    front_end.main([*common, "--attack=greedy-typo", f"--output_dir={tmp_path / 'greedy'}"])
    clean = [json.loads(line) for line in (tmp_path / "clean" / "samples.jsonl").read_text().splitlines()]
    rows = [json.loads(line) for line in (tmp_path / "greedy" / "samples.jsonl").read_text().splitlines()]
    result = json.loads((tmp_path / "greedy" / "results.json").read_text())
    assert [r["unattacked"] for r in rows] == [r["sample"] for r in clean]
    for r, c in zip(rows, clean):
        assert r["attacked"] == (c["prediction"] == c["label"])
        assert (r["sample"] != r["unattacked"]) == r["attack_success"]
        assert r["prediction"] == (1 - r["label"] if r["attack_success"] else c["prediction"])
    assert result["attack"]["flipped"] == sum(r["attack_success"] for r in rows)
    assert result["attack"]["attacked"] + result["attack"]["already_wrong"] == len(rows)
    assert "attack greedy-typo" in capsys.readouterr().out


def test_front_end_one_class_is_one_clear_error(tmp_path, capsys):
    data = tmp_path / "one.jsonl"
    data.write_text('{"text": "a fine day", "label": "positive"}\n{"text": "a fine film", "label": "positive"}\n')
    with pytest.raises(SystemExit) as exit_info:
        front_end.main([f"--dataset={data}", f"--output_dir={tmp_path / 'run'}"])
    assert exit_info.value.code == 2
    assert "one class only" in capsys.readouterr().err


def test_encoder_target_is_scored_by_a_probe_and_compared_fairly():
    found = mstemp.run(BagOfWords(), {"fake": FakeEvaluator()}, BagOfWords(), DATA, CONFIG,
                       target_name="bow", filter_name="bow")
    result, rows = found.to_dict(), list(found.samples())
    assert found.numbers()["mstemp_fair_drop"].value == result["fair_drop"]
    assert "linear probe" in result["classifier"]
    assert 0 <= result["baseline_accuracy"] <= 1 and 0 <= result["generated_accuracy"] <= 1
    assert result["drop"] == pytest.approx(result["baseline_accuracy"] - result["generated_accuracy"])
    assert result["n_generated"] == len(rows) == result["per_evaluator"]["fake"]["samples"]
    assert all(r["prediction"] in (0, 1) for r in rows)


def test_greedy_attack_on_a_probed_encoder_flips_what_it_reports():
    generated = mstemp.generate({"fake": FakeEvaluator()}, BagOfWords(), DATA, CONFIG)
    found = mstemp.evaluate(BagOfWords(), DATA, generated, CONFIG, target_name="bow", filter_name="bow")
    clean, clean_rows = found.to_dict(), found.rows
    config = mstemp.Config(**{**CONFIG.__dict__, "attack": "greedy-typo", "attack_strength": 2})
    attacked = mstemp.evaluate(BagOfWords(), DATA, generated, config, target_name="bow", filter_name="bow")
    result, rows = attacked.to_dict(), attacked.rows
    assert "prediction" not in generated.rows[0] and "unattacked" not in generated.rows[0]  # each target its copy
    assert [r["unattacked"] for r in rows] == [r["sample"] for r in clean_rows]
    assert result["attack"]["flipped"] >= 1 and "attack" not in clean
    for r, c in zip(rows, clean_rows):
        assert r["attacked"] == (c["prediction"] == r["label"])
        assert (r["prediction"] == r["label"]) == (r["attacked"] and not r["attack_success"])
        assert (r["sample"] != r["unattacked"]) == r["attack_success"]
    before, after = clean["per_evaluator"]["fake"], result["per_evaluator"]["fake"]
    assert after["accuracy_all_samples"] == pytest.approx(before["accuracy_all_samples"]
                                                          - result["attack"]["flipped"] / len(rows))


def test_fair_accuracy_draws_n_of_the_generated_samples():
    from lmprobe.methods.mstemp.accuracy import fair_accuracy

    rng = np.random.default_rng(0)
    correct = np.r_[np.ones(50), np.zeros(50)]
    mean, std = fair_accuracy(correct, 10, 200, rng)
    assert mean == pytest.approx(0.5, abs=0.05) and std > 0.05  # draws of 10 vary
    assert fair_accuracy(correct[45:53], 10, 5, rng) == (pytest.approx(0.625), 0.0)  # fewer than N: all of them


@pytest.mark.parametrize("argv, expected", [
    ([], ("rt-polarity", "test")),  # the default seeds: rt-polarity's test split
    (["--dataset=offline-sentiment"], ("offline-sentiment", "test")),  # one split: the name is unused
    (["--dataset=tfds:glue/sst2"], ("tfds:glue/sst2", "validation")),
    (["--dataset=tweets-sentiment@0.8", "--split=validation"], ("tweets-sentiment@0.8", "validation")),
])
def test_front_end_dataset_and_split_defaults(monkeypatch, tmp_path, argv, expected):
    asked = []

    def load_labelled(spec, **kwargs):
        asked.append((spec, kwargs["split"]))
        raise LmprobeError("stop here")

    monkeypatch.setattr(front_end, "load_labelled", load_labelled)
    with pytest.raises(SystemExit):
        front_end.main([*argv, f"--output_dir={tmp_path / 'run'}"])
    assert asked == [expected]
