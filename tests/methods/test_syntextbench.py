"""SynTextBench end to end: a known answer on Gaussian embeddings, real models, bad input."""

import json

import numpy as np
import pytest
from scipy.stats import norm

from lmprobe.cli import syntextbench as front_end
from lmprobe.data import sentence_stats, synthetic
from lmprobe.engine.runner import run_here
from lmprobe.errors import LmprobeError
from lmprobe.methods import loss_data, syntextbench
from lmprobe.report import plots
from tests.engine.conftest import tiny_llama_dir  # noqa: F401

SMALL = dict(n=256, levels=(0.0, 0.2, 0.5, 0.95), baselines=False, icl_examples=0)


class GaussianScorer:
    """Stands in for a model: embeds a sentence as label * s * e_1 + N(0, I_d)."""

    is_decoder = False
    truncated = 0

    class runner:  # noqa: N801 -- a Scorer's runner, as far as SynTextBench asks: its programs run here
        program = staticmethod(run_here)

    def __init__(self, tasks, s: float, d: int = 32, seed: int = 0):  # tasks: one set, or a list of (trials)
        self.label = {t: y for one in (tasks if isinstance(tasks, list) else [tasks]) for pair in one.levels
                      for split in pair for t, y in zip(split.sentences, split.labels)}
        self.s, self.d, self.rng = s, d, np.random.default_rng(seed)

    def embed(self, texts, pooling):
        signal = np.zeros((len(texts), self.d))
        signal[:, 0] = self.s * np.asarray([self.label[t] for t in texts])
        return signal + self.rng.normal(size=(len(texts), self.d))


def test_gaussian_embeddings_give_the_closed_form_accuracy():
    config = syntextbench.Config(**{**SMALL, "n": 4096})
    tasks = syntextbench.build_tasks(config)
    s = 1.0
    result = syntextbench.run(GaussianScorer(tasks, s), config, model_name="gaussian", tasks=[tasks])
    # Isotropic classes N(+-s e_1, I): whitening keeps the inter/intra distance ratio, so the
    # Bayes accuracy of the raw problem, Phi(s), comes back at every level.
    for level in result.levels:
        assert level["accuracy"] == pytest.approx(norm.cdf(s), abs=0.03)
    acc = np.array([lv["accuracy"] for lv in result.levels])
    margin = np.array([lv["margin"] for lv in result.levels])
    exact = lambda a_t: np.sum(margin * np.clip(acc - a_t, 0, None)) / len(acc)  # noqa: E731
    assert result.score.value == pytest.approx(exact(config.a_t), rel=1e-5)
    assert list(result.scores_by_a_t) == [f"{a:g}" for a in syntextbench.A_T_SWEEP]
    for a in syntextbench.A_T_SWEEP:
        assert result.scores_by_a_t[f"{a:g}"] == pytest.approx(exact(a), rel=1e-5, abs=1e-7)


def test_trials_redraw_the_tasks_and_report_mean_and_std():
    config = syntextbench.Config(**SMALL, seed=5, trials=3)
    tasks = [syntextbench.build_tasks(c) for c in syntextbench.trial_configs(config)]
    result = syntextbench.run(GaussianScorer(tasks, 1.0), config, model_name="g", tasks=tasks)
    summary = result.to_dict()["trials"]
    scores = [t.score.value for t in result.trials]
    assert summary["seeds"] == [5, 6, 7] and summary["scores"] == scores and len(set(scores)) == 3
    assert summary["score"] == {"mean": pytest.approx(np.mean(scores)), "std": pytest.approx(np.std(scores, ddof=1))}
    assert summary["scores_by_a_t"]["0.7"]["mean"] == pytest.approx(np.mean(scores))  # a_t 0.7 is in the sweep
    assert "icl_accuracy_mean" not in summary  # an encoder has none
    number = result.numbers()["syntextbench"]  # the score: the trials' mean, its standard error on 2 df
    assert number.value == pytest.approx(np.mean(scores)) and number.df == 2
    assert number.stderr == pytest.approx(np.std(scores, ddof=1) / 3 ** 0.5)
    assert result.to_dict()["score"] == number.value and result.to_dict()["config"]["seed"] == 5
    with pytest.raises(LmprobeError, match="trials=0"):
        syntextbench.trial_configs(syntextbench.Config(**SMALL, trials=0))


def test_no_nesting_ablation_changes_only_the_sentences():
    nested = syntextbench.build_tasks(syntextbench.Config(**SMALL))
    flat = syntextbench.build_tasks(syntextbench.Config(**{**SMALL, "p_n": 0.0}))
    repeats = lambda tasks: sum(not new for train, _ in tasks.levels for new in train.is_new)  # noqa: E731
    assert repeats(flat) == 0 < repeats(nested)


def test_label_word_fraction_of_lm_free_sets_is_one_minus_p():
    config = syntextbench.Config(**{**SMALL, "n": 2048, "levels": (0.0, 0.4, 1.0)})
    tasks = syntextbench.build_tasks(config)
    exact = [sentence_stats.task_label_fractions(train) for train, _ in tasks.levels]
    assert np.all(exact[0] == 1.0) and np.all(exact[2] == 0.0)  # p = 0: only class words; p = 1: none
    assert exact[1].mean() == pytest.approx(0.6, abs=0.03)  # every token copies a new word: class w.p. 1 - p
    assert [syntextbench.label_word_fraction(tasks, pair) for pair in tasks.levels][::2] == [1.0, 0.0]
    # by list membership (what an LM-generated set allows) the share is close: a neutral draw may also be a
    # class word, a lexicon entry with an apostrophe or a dot splits into pieces
    train = tasks.levels[1][0]
    member = sentence_stats.label_word_fractions(train.sentences, train.labels, tasks.lists.positive,
                                                 tasks.lists.negative)
    assert np.nanmean(member) == pytest.approx(exact[1].mean(), abs=0.05)


def test_sentence_statistics():
    assert sentence_stats.words("She's a lotus-eater, isn't she? health_care!") == [
        "she", "s", "a", "lotus-eater", "isn", "t", "she", "health_care"]
    fractions = sentence_stats.label_word_fractions(
        ["good bad the", "Bad, bad.", "the", "table good"], [1, -1, 1, -1], ["good"], ["bad"], ignore=["the"])
    np.testing.assert_array_equal(fractions, [0.5, 1.0, np.nan, 0.0])
    assert sentence_stats.mean_label_fraction(fractions) == 0.5
    np.testing.assert_array_equal(sentence_stats.sentence_lengths(["The cat sat on the mat.", "It is."], ["the", "on",
                                                                   "it", "is"]), [3, 0])
    shares, bins = sentence_stats.length_histogram([1, 1, 2, 80], max_length=5)
    np.testing.assert_array_equal(bins, np.arange(6))
    np.testing.assert_allclose(shares, [0, 0.5, 0.25, 0, 0, 0.25])  # 80 lands in the last bin


def test_fig3_and_fig5_plots(tmp_path):
    plots.label_word_share({"LM-free": ((0, 0.5, 1), (1.0, 0.5, 0.0)), "lm": ((0, 0.5, 1), (0.3, 0.2, 0.1))},
                           str(tmp_path / "f3.png"))
    plots.sentence_length_histograms({"a": [1, 2, 3], "b": []}, str(tmp_path / "f5.png"), note="fortunes")
    assert (tmp_path / "f3.png").stat().st_size > 0 and (tmp_path / "f5.png").stat().st_size > 0


def test_bad_settings_fail_before_any_model():
    for bad, match in ((dict(a_t=1.5), "a_t=1.5"), (dict(levels=(0.1, 1.2)), r"\[0, 1\]"),
                       (dict(n=4), "n=4"), (dict(lexicon="no-such-lexicon"), "no-such-lexicon")):
        with pytest.raises(LmprobeError, match=match):
            syntextbench.build_tasks(syntextbench.Config(**{**SMALL, **bad}))


def test_front_end_trials_report_mean_std_sweep_and_mean_icl(tiny_llama_dir, tmp_path, capsys):  # noqa: F811
    front_end.main([f"--model={tiny_llama_dir}", "--n=200", "--levels=0,0.5", "--no_baselines", "--icl_examples=4",
                    "--trials=2", "--batch_size=8", f"--output_dir={tmp_path}"])
    result = json.loads((tmp_path / "results.json").read_text())
    trials = result["trials"]
    assert trials["trials"] == 2 and trials["seeds"] == [0, 1]
    assert result["score"] == pytest.approx(np.mean(trials["scores"]))
    assert trials["score"]["std"] == pytest.approx(np.std(trials["scores"], ddof=1))
    icl = [level["icl_accuracy"] for level in result["levels"]]
    assert result["icl_accuracy_mean"] == pytest.approx(np.mean(icl)) and "icl_accuracy_mean" in trials
    assert set(result["scores_by_a_t"]) == {f"{a:g}" for a in syntextbench.A_T_SWEEP}
    assert result["n"] == 200 and result["n_train"] == 180 and result["n_test"] == 20  # the split is recorded
    out = capsys.readouterr().out
    assert "mean +- std of 2 trials" in out and "n = 200: 180 train + 20 test sentences per level" in out
    header = next(line for line in out.splitlines() if line.split()[:1] == ["p"])
    assert set(header.split()) == set(result["levels"][0])  # stdout's columns are results.json's keys


def test_the_score_is_said_and_saved_before_the_baselines(tiny_llama_dir, tmp_path, capsys, monkeypatch):  # noqa: F811
    """The loss-data baselines take minutes after the score: stopped there, the score is on stdout
    and in results.json already, marked pending."""
    def stop(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(loss_data, "loss_data_curves", stop)
    with pytest.raises(SystemExit):
        front_end.main([f"--model={tiny_llama_dir}", "--n=200", "--levels=0,0.2", "--icl_examples=0",
                        "--batch_size=8", f"--output_dir={tmp_path}"])
    out = capsys.readouterr().out
    saved = json.loads((tmp_path / "results.json").read_text())
    assert f"SynTextBench score {saved['score']:.4f}; in-context accuracy and baselines follow" in out
    assert "baselines" in saved["pending"] and saved["trial_scores"] == [saved["score"]]
    assert saved["run_info"]["command"]["argv"] and "levels" not in saved


def test_too_few_test_sentences_are_refused_with_the_smallest_n_that_works():
    for n in (16, syntextbench.MIN_N - 1):
        with pytest.raises(LmprobeError, match=f"n={n} .* use n >= {syntextbench.MIN_N}"):
            syntextbench.Config(n=n).check()
    syntextbench.Config(n=syntextbench.MIN_N).check()
    assert syntextbench.MIN_N == 195 and synthetic.test_size(syntextbench.MIN_N) == syntextbench.MIN_TEST_SENTENCES
    for energy in (0, 2, -0.5):
        with pytest.raises(LmprobeError, match=r"energy=.* \(0, 1\]"):
            syntextbench.Config(energy=energy).check()
    syntextbench.Config(energy=1.0).check()


@pytest.mark.slow
def test_minilm_end_to_end_difficulty_steers_and_rerun_uses_cache(tmp_path, capsys):
    # n = 1024: 461 training sentences per class, enough for MiniLM's 384-dim covariances (accuracy 0.82 at
    # p = 0 against 0.55 at 0.95; n = 2048 doubled the embedding, 20 s, for the same verdicts)
    args = ["--model=minilm-l6", "--n=1024", "--levels=0,0.95", "--no_baselines", f"--output_dir={tmp_path}"]
    front_end.main(args)
    result = json.loads((tmp_path / "results.json").read_text())
    assert result["method"] == "syntextbench" and result["model"] == "minilm-l6"
    acc = {lv["p"]: lv["accuracy"] for lv in result["levels"]}
    assert acc[0.0] > acc[0.95] + 0.1, acc
    assert {"margin", "feasibility"} <= set(result["levels"][0])
    assert (tmp_path / "margin_accuracy.png").stat().st_size > 0 and (tmp_path / "goodness.png").exists()
    cached = sorted(p.name for p in (tmp_path / "cache").iterdir())
    assert len(cached) == 4  # 2 levels x train/test
    front_end.main(args)  # rerun: same numbers from the cached embeddings
    assert json.loads((tmp_path / "results.json").read_text())["score"] == result["score"]
    assert sorted(p.name for p in (tmp_path / "cache").iterdir()) == cached
