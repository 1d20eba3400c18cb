"""SCoPE end to end on a tiny random BERT with a character-level WordPiece vocabulary."""

import json
import string

import numpy as np
import pytest
from transformers import BertConfig, BertModel, BertTokenizerFast

from lmprobe.checkpoints import variants
from lmprobe.cli import scope as front_end
from lmprobe.engine import Scorer
from lmprobe.errors import LmprobeError
from lmprobe.methods import scope as scope_method
from lmprobe.methods.scope import capabilities, models, training
from lmprobe.methods.scope.search import Goal, score, search
from lmprobe.perturb.constraints import Words
from tests.data.test_labelled import pang_lee  # noqa: F401 - a fixture: rt-polarity installed in tmp
from tests.models.parity import save_random

TEXTS = ["a fast, funny, highly enjoyable movie.", "my reaction in a word: disappointment.",
         "too slow, too long, and too little happens.", "a warm, funny, engaging film.",
         "the of and", "Men love sports and women watch them."]
LABELS = np.array([1, 0, 0, 1, 0, 1])
NAMES = ("negative", "positive")


@pytest.fixture(scope="module")
def scorer(tmp_path_factory):
    path = tmp_path_factory.mktemp("scope_bert")
    save_random(BertModel, BertConfig(vocab_size=100, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                      num_attention_heads=4, max_position_embeddings=128), path)
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *string.ascii_lowercase,
             *("##" + c for c in string.ascii_lowercase), *".,!?'-:", *string.digits]
    vocab += [f"[unused{i}]" for i in range(100 - len(vocab))]
    (path / "vocab.txt").write_text("\n".join(vocab) + "\n")
    BertTokenizerFast(str(path / "vocab.txt")).save_pretrained(path)
    return Scorer.load(str(path), batch_size=16)


@pytest.fixture(scope="module")
def classifier(scorer):
    model, losses = training.finetune(scorer, TEXTS * 4, np.tile(LABELS, 4), NAMES,
                                      config=training.TrainConfig(learning_rate=3e-3, batch_size=8, epochs=4))
    return model, losses


def test_finetuning_lowers_training_loss(classifier):
    _, losses = classifier
    assert losses[-1] < losses[0]


def test_linear_probe_lowers_loss_and_checks_labels(scorer):
    _, losses = training.linear_probe(scorer, TEXTS, LABELS, NAMES, config=training.TrainConfig(1e-2, 4, 10))
    assert losses[-1] < losses[0]
    with pytest.raises(LmprobeError, match="outside the head's classes"):
        training.linear_probe(scorer, TEXTS, LABELS + 1, NAMES)


@pytest.mark.parametrize("name", ["synonym", "typo"])
def test_search_respects_constraints_keeps_argmax_and_beats_random(classifier, name):
    model, _ = classifier
    capability = capabilities.get(name, max_words=1)  # one batched call per trial; several words: tests/perturb
    result = search(model, TEXTS, capability, trials=2, seed=0)
    assert result.skipped.get("no eligible word") == 1  # "the of and"
    assert result.model_calls <= 1 + 2  # base outputs + at most one batched call per trial
    base = model.log_probs(TEXTS)
    assert result.n_invariant >= 3
    rng = np.random.default_rng(1)
    found, random_valid = [], []
    for p in result.perturbations:
        words, new = Words.of(p.text), Words.of(p.perturbed)
        changed = [i for i, (a, b) in enumerate(zip(words.words, new.words)) if a != b]
        assert changed == list(p.words) and all(i in capability.constraints.eligible(words) for i in changed)
        options = [words.replace({i: w}) for i in capability.constraints.eligible(words)
                   for w in capability.transform(words.words[i], rng) if w != words.words[i]]
        loss, same = score(model, base, options + [p.perturbed], [p.index] * (len(options) + 1), Goal())
        assert same[-1] == p.invariant and abs(loss[-1] - p.objective) < 1e-5
        if p.invariant:
            found.append(p.objective)
            random_valid.append(rng.choice(loss[:-1][same[:-1]]))
        else:  # App. E.1: no invariant candidate at all, the lowest-L edit is kept
            assert not same[:-1].any() and len(changed) == 1
    assert np.mean(found) < np.mean(random_valid)
    assert result.n_perturbed == len(TEXTS) - 1 and "no invariant candidate" not in result.skipped
    trials = {}
    for p in result.perturbations:
        assert p.perturbed not in trials.setdefault(p.index, set())  # distinct trials
        trials[p.index].add(p.perturbed)
    again = search(model, TEXTS, capability, trials=2, seed=0)
    assert [p.perturbed for p in again.perturbations] == [p.perturbed for p in result.perturbations]


def test_fairness_and_kl_objective(classifier):
    model, _ = classifier
    result = search(model, TEXTS, capabilities.get("fairness"), goal=Goal("kl"), trials=1)
    assert result.skipped["no eligible word"] == 5 and result.n_invariant <= 1
    for p in result.perturbations:
        assert (
            p.perturbed.split()[0] in ("Boys", "Girls", "Gentlemen", "Ladies", "Women")
            or "men" not in p.perturbed.split()
        )


def test_self_comparison_is_one_everywhere(classifier):
    model, _ = classifier
    result = scope_method.run(
        model, {"self": model}, TEXTS, LABELS, scope_method.Config(capability="typo", trials=2, n_bootstrap=50)
    )
    out, samples = result.to_dict(), list(result.samples())
    row = out["targets"]["self"]
    assert result.numbers() == {scope_method.NAMES[m]: number for m, number in result.targets["self"].metrics.items()}
    assert result.numbers()["scope_hard"].value == 1.0 and result.numbers()["scope_hard"].df == 1
    assert row["iid_agreement"] == row["ood_agreement"] == row["hard_scope"] == row["soft_scope"] == 1.0
    assert row["iid_accuracy_gap"] == 0.0 and out["n_invariant"] >= 3 and len(samples) == out["n_pairs"]
    assert row["std_error"] == dict.fromkeys(row["std_error"], 0.0) and row["trials"] == 2
    assert row["counts"]["ood_agreement"]["pairs"] == out["n_pairs"] == 2 * out["n_perturbed"]
    assert row["counts"]["hard_scope"]["pairs"] == out["n_invariant_pairs"]
    assert set(samples[0]["probs"]["self"]) == {"x", "x_perturbed"}


def test_head_label_mismatch_is_a_clear_error(classifier):
    model, _ = classifier
    with pytest.raises(LmprobeError, match="2-way head"):
        models.EncoderClassifier("m", model.scorer, ("a", "b", "c"))


def test_black_box_estimates_from_samples(classifier):
    model, _ = classifier
    box = models.SampledModel("box", models.sampler_from(model), NAMES, k=20)
    a, b = np.asarray(box.log_probs(TEXTS)), np.asarray(box.log_probs(TEXTS))
    assert np.array_equal(a, b) and np.allclose(np.exp(a).sum(-1), 1.0)


def test_variants(scorer):
    model = scorer.model
    n = model.config.num_hidden_layers
    dropped = variants.apply_variants(model, ["drop-layer=0"])
    assert dropped.config.num_hidden_layers == n - 1
    kernel = np.asarray(model.layer.attention.self.query.kernel[...])
    q = variants.apply_variants(model, ["int8"])
    qk = np.asarray(q.layer.attention.self.query.kernel[...])
    assert 0 < np.abs(qk - kernel).max() <= np.abs(kernel).max(axis=-2).max() / 127
    b = variants.apply_variants(model, ["bf16"])
    assert np.array_equal(
        np.asarray(b.layer.attention.self.query.kernel[...]), kernel.astype("bfloat16").astype("float32")
    )
    assert model.config.num_hidden_layers == n and np.array_equal(
        np.asarray(model.layer.attention.self.query.kernel[...]), kernel
    )
    with pytest.raises(LmprobeError, match="unknown model variant"):
        variants.split_name("m@fp4")


def test_glue_sst2_base_samples_come_from_its_labelled_validation_split(monkeypatch):
    asked = []
    monkeypatch.setattr(front_end, "load_labelled", lambda spec, split, **kw: asked.append((spec, split)))
    for argv, split in ((["--dataset=hf:glue:sst2"], "validation"), (["--dataset=tfds:glue/sst2"], "validation"),
                        (["--dataset=hf:glue:sst2", "--split=test"], "test")):
        front_end._data(front_end.build_parser()[0].parse_args(argv))
        assert asked[-2:] == [(argv[0].split("=")[1], "train"), (argv[0].split("=")[1], split)]


def test_the_default_dataset_is_rt_polarity_train_and_test_splits(pang_lee):  # noqa: F811
    args = front_end.build_parser()[0].parse_args(["--max_examples=10"])
    train, test = front_end._data(args)
    assert train.source.startswith("rt-polarity (train split)") and test.source.startswith("rt-polarity (test split)")
    assert len(train) == 56 and len(test) == 10 and not set(train.texts) & set(test.texts)
    args = front_end.build_parser()[0].parse_args(["--dataset=offline-sentiment"])
    assert args.dataset == "offline-sentiment"  # the silver set stays available by name


def test_heads_train_on_the_whole_training_split_unless_capped(tmp_path):
    data = tmp_path / "data.csv"
    data.write_text("text,label\n" + "\n".join(f"sentence number {i},{i % 2}" for i in range(20)) + "\n")
    parse = front_end.build_parser()[0].parse_args
    train, test = front_end._data(parse([f"--dataset={data}", "--max_examples=3"]))
    assert len(train) == 16 and len(test) == 3  # an 80/20 split of a file: every training row
    assert len(front_end._data(parse([f"--dataset={data}", "--max_train=5"]))[0]) == 5
    args = parse(["--head_layout=mean", "--head=checkpoint"])
    assert args.head_layout == "mean" and args.head == "checkpoint" and args.max_train is None


def test_one_trial_writes_strict_json_with_reasons_and_a_cached_search_says_so(classifier, tmp_path):
    from lmprobe.store import write_results

    model, _ = classifier
    config = scope_method.Config(capability="typo", trials=1, n_bootstrap=0)
    first = scope_method.run(model, {"self": model}, TEXTS, LABELS, config, cache_dir=str(tmp_path / "cache")).to_dict()
    again = scope_method.run(model, {"self": model}, TEXTS, LABELS, config, cache_dir=str(tmp_path / "cache")).to_dict()
    assert first["search"]["cached"] is False and again["search"]["cached"] is True
    write_results(tmp_path / "results.json", again)
    text = (tmp_path / "results.json").read_text()
    row = json.loads(text, parse_constant=lambda c: (_ for _ in ()).throw(ValueError(c)))["targets"]["self"]
    assert row["std_error"]["ood_agreement"] is None and "two trials" in row["std_error_note"]
    assert row["intervals"]["hard_scope"] == [None, None] and "bootstrap" in row["intervals_note"]


def test_one_trial_prints_n_a_where_a_spread_is_undefined(classifier):
    model, _ = classifier
    config = scope_method.Config(capability="typo", trials=1, n_bootstrap=0)
    result = scope_method.run(model, {"self": model}, TEXTS, LABELS, config).to_dict()
    text = front_end._summary(result)
    row = text.splitlines()[-1]  # one trial: no standard error of the pair metrics, no bootstrap interval
    assert "nan" not in text and row.count("[n/a,n/a]") == 5
    assert row.count("+-0.000") == 2 and row.count("+-") == 2  # the IID metrics' spread is 0; pair metrics: the mean
