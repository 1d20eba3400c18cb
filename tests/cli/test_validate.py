"""experiments.validate: ladders found among the records (lmprobe.evaluate.measure's entries: tests/evaluate), one
point per base model, trends with exact p, the summary text (synthetic records, no model), and end to end
with every method faked (known outputs): the methods' own tests cover the methods, and a real run
on a tiny model takes minutes."""

from __future__ import annotations

import itertools
import json
import math
import os
import types

import numpy as np
import pytest
from scipy import stats

from lmprobe.cli import validate
from lmprobe.evaluate import measure as measure_lib
from lmprobe.methods import byod as byod_method
from lmprobe.methods import realtask
from lmprobe.methods import stages as stages_lib
from lmprobe.methods import synbench as synbench_method
from lmprobe.methods import syntextbench as syntextbench_method
from lmprobe.methods.byod.common import MetricResult
from lmprobe.methods.result import Number
from lmprobe.report import validation
from tests.evaluate.test_measure import fake_run

# a base model's noise ladder: syntextbench falls with noise, the probe does not; bits per byte rises
NUMBERS = {
    "dec-a": (0.50, 0.80, 1.1), "dec-a@noise=0.1": (0.40, 0.82, 1.5), "dec-a@noise=0.3": (0.30, 0.60, 6.5),
    "dec-b": (0.45, 0.75, 1.3), "dec-b@drop-layer=1": (0.41, 0.70, 1.6), "dec-b@drop-layer=3": (0.42, 0.71, 1.7),
    "dec-c": (0.20, 0.55, 1.9), "dec-c@int8": (0.21, 0.56, 1.9), "dec-d": (0.35, 0.62, 1.4),
    "enc-e": (0.6, 0.9, None), "enc-e@noise=0.1": (0.5, 0.8, None), "enc-e@noise=0.2": (0.4, 0.7, None),
    "enc-f": (0.3, 0.7, None),
}


def _record(label: str, numbers=None) -> dict:
    entry = measure_lib.model_entry(label)
    syn, probe, bpb = numbers or NUMBERS[label]
    values = {"syntextbench": syn, "synbench_ceiling": 0.99, "probe_rt_polarity": probe}
    if bpb is not None:
        values["heldout_bits_per_byte"] = bpb
    return {"model": label, "label": label, "base": entry.base, "ladder": list(entry.ladder) if entry.ladder else None,
            "group": "encoders" if label.startswith("enc") else "decoders", "width": 64, "numbers": values,
            "stderr": {"syntextbench": 0.02, "probe_rt_polarity": 0.01}}


RECORDS = [_record(label) for label in NUMBERS]


def test_a_ladder_needs_three_members_of_distinct_levels_and_correlations_one_point_per_base():
    decoders = [r for r in RECORDS if r["group"] == "decoders"]
    ladders, notes = validation.find_ladders(decoders)
    assert ladders == {"dec-a @noise": {"direction": "falls", "models": ["dec-a", "dec-a@noise=0.1", "dec-a@noise=0.3"],
                                        "levels": [0.0, 0.1, 0.3], "indices": [0, 1, 2]}}
    assert notes == ["dec-b @drop-layer: members share a level ([0.0, 1.0, 1.0]): no known order, not a ladder"]
    picked, notes = validation.base_points(decoders)
    assert [decoders[i]["label"] for i in picked] == ["dec-a", "dec-b", "dec-c", "dec-d"] and notes == []
    # a base measured only as variants: its first variant stands for it, and says so
    picked, notes = validation.base_points([_record("x@int8", (0.1, 0.5, 1.0)), _record("dec-d")])
    assert picked == [0, 1] and notes == ["x was not measured itself: x@int8 stands for it"]


def _exact_p(x, y, statistic) -> float:
    """Two-sided permutation p by enumerating every ordering of y with scipy's statistic."""
    observed = abs(statistic(x, y).statistic)
    values = [abs(statistic(x, [y[i] for i in order]).statistic) for order in itertools.permutations(range(len(y)))]
    return sum(v >= observed - 1e-12 for v in values) / len(values)


def test_trends_along_ladders_have_exact_p_and_correlations_use_base_models_only():
    trends = validation.ladder_trends(RECORDS)
    rows = {(r["ladder"], r["name"]): r for r in trends["decoders"]["rows"]}
    syn = rows[("dec-a @noise", "syntextbench")]  # falls with noise as quality does: tau signed +1
    tau = stats.kendalltau([0, 1, 2], [0.50, 0.40, 0.30]).statistic
    assert syn["tau"] == pytest.approx(-tau) == pytest.approx(1.0) and syn["monotone"] == 1 and syn["follows"]
    # exact, one-sided in the stated direction: 1 of the 3! orderings is as extreme
    assert syn["p"] == pytest.approx(1 / math.factorial(3)) and syn["alternative"] == "greater"
    assert syn["family_size"] == 1 and syn["p_adjusted"] == syn["p"]  # the only proxy with a trend on this ladder
    probe = rows[("dec-a @noise", "probe_rt_polarity")]  # 0.80, 0.82, 0.60: not monotone
    assert probe["tau"] == pytest.approx(-stats.kendalltau([0, 1, 2], [0.80, 0.82, 0.60]).statistic)
    assert probe["monotone"] == 0
    bpb = rows[("dec-a @noise", "heldout_bits_per_byte")]  # lower is better, rises with noise: follows
    assert bpb["tau"] == pytest.approx(1.0) and bpb["follows"]

    correlations = validation.correlate(RECORDS, pooled=True)
    decoders = correlations["decoders"]
    assert decoders["models"] == ["dec-a", "dec-b", "dec-c", "dec-d"]
    row = next(r for r in decoders["rows"] if (r["proxy"], r["task"]) == ("syntextbench", "probe_rt_polarity"))
    x, y = [0.50, 0.45, 0.20, 0.35], [0.80, 0.75, 0.55, 0.62]
    assert row["n"] == 4 and row["spearman"]["estimate"] == pytest.approx(stats.spearmanr(x, y).statistic)
    assert row["spearman"]["p"] == pytest.approx(_exact_p(x, y, stats.spearmanr))
    assert row["kendall"]["p"] == pytest.approx(_exact_p(x, y, stats.kendalltau))
    assert "synbench_ceiling" not in {r["proxy"] for r in decoders["rows"]}  # a reference, not a proxy
    assert len(decoders["pooled"]["models"]) == 9 and "not independent" in decoders["pooled"]["why"]
    assert correlations["encoders"]["rows"] == [] and "2 base models" in correlations["encoders"]["note"]


def test_summary_names_models_errors_ladders_and_the_power_of_each_correlation():
    correlations = validation.correlate(RECORDS, pooled=True)
    trends, resolved = validation.ladder_trends(RECORDS), validation.resolved(RECORDS)
    assert resolved["decoders"]["syntextbench"]["n_pairs"] == 36
    assert ["dec-c", "dec-c@int8"] in resolved["decoders"]["syntextbench"]["unresolved"]  # 0.01 apart, se 0.02
    text = validate.summary(RECORDS, correlations, trends, resolved)
    print(text)
    assert "0.5000±0.0200" in text and "1.1000 " in text  # ± where a standard error exists, the value alone else
    assert "ladder dec-a @noise (known order: dec-a < dec-a@noise=0.1 < dec-a@noise=0.3; quality falls" in text
    assert "members share a level" in text
    assert "variants dropped: dec-a@noise=0.1" in text and "cannot reach p < 0.05" in text
    assert "2 base models (enc-e, enc-f)" in text and "pooled: every model" in text


def test_a_fixed_synbench_n_at_or_below_the_width_is_refused(tmp_path, monkeypatch, capsys):
    FakeMethods(monkeypatch)
    with pytest.raises(SystemExit):
        validate.main(["--models=a,b,c", "--proxies=synbench", "--tasks=probes", "--synbench_n=64",
                       f"--output_dir={tmp_path}", "--verbosity=warning"])
    assert "--synbench_n=64 is not above a's width 64" in capsys.readouterr().err


def test_main_writes_results_and_plots_from_measured_records(tmp_path, monkeypatch, capsys):
    by_label, figures = {r["label"]: r for r in RECORDS}, []
    monkeypatch.setattr(stages_lib, "load_inputs", lambda stages, settings, **kw: None)
    monkeypatch.setattr(validate.common, "load_scorer", lambda args, name: None)
    monkeypatch.setattr(measure_lib, "measure", lambda entry, *rest, **kw: by_label[entry.label])
    monkeypatch.setattr(validate.gc, "collect", lambda: 0)  # no weights to free; a full collection takes 0.5 s
    monkeypatch.setattr(validate.plots, "save_figure",
                        lambda fig, path: (figures.append(os.path.basename(path)), validate.plots.plt.close(fig)))
    validate.main([f"--models={','.join(NUMBERS)}", f"--output_dir={tmp_path}",
                   "--verbosity=warning"])
    result = json.loads((tmp_path / "results.json").read_text())
    assert set(result) >= {"models", "correlations", "ladders", "resolved"}
    assert result["correlations"]["decoders"]["models"] == ["dec-a", "dec-b", "dec-c", "dec-d"]
    assert "pooled" not in result["correlations"]["decoders"]  # only with --pooled
    assert figures == ["scatter-decoders.png", "scatter-encoders.png"]  # drawn: lmprobe/report tests
    assert "across base models" in capsys.readouterr().out


class FakeMethods:
    """Every method validate calls, faked with known outputs (a model's outputs follow its noise
    level), counting calls: the plumbing from methods to numbers, errors, caches and ladders."""

    def __init__(self, monkeypatch):
        self.calls = []
        m = monkeypatch.setattr
        sets = {"rt_polarity": ([], []), "tweets": ([], [])}
        m(stages_lib, "load_inputs", lambda stages, s, **kw: stages_lib.Inputs(
            tasks=[None] * s.syntextbench.trials, probes=sets, heldout=["a held-out text"]))
        m(validate.common, "load_scorer", lambda args, name: types.SimpleNamespace(
            name=name, is_decoder=True, config=types.SimpleNamespace(hidden_size=64), identity={"name": name}))
        m(validate.gc, "collect", lambda: 0)
        m(validate.plots, "scatter_grid", lambda *a, **kw: self.calls.append(("scatter", a[-1])))
        m(stages_lib.syntextbench, "run", self.syntextbench)
        m(stages_lib.synbench, "scorer_representation", lambda scorer, name, **kw: scorer)
        m(stages_lib.synbench, "run", self.synbench)
        m(stages_lib.synbench, "ceiling", lambda width, config, **kw: self.synbench(None, config, ceiling=width))
        m(stages_lib.byod, "run", self.byod)
        task = stages_lib.realtask
        m(task, "probe", lambda scorer, *a, **kw: self.task(scorer, "probe", "balanced_accuracy"))
        m(task, "zero_shot", lambda scorer, *a, **kw: self.task(scorer, "zero_shot", "balanced_accuracy"))
        m(task, "perplexity", lambda scorer, *a, **kw: self.task(scorer, "heldout", "bits_per_byte", nll_per_token=3.0))

    @staticmethod
    def noise(scorer) -> float:
        return float(scorer.name.rsplit("=", 1)[1]) if "@noise=" in scorer.name else 0.0

    def syntextbench(self, scorer, config, **kw):
        trials = []
        for trial in syntextbench_method.trial_configs(config):  # the method's own trials, each faked
            self.calls.append(("syntextbench", scorer.name, trial.seed))
            trials.append(syntextbench_method.Result(scorer.name, Number(0.5 - self.noise(scorer) + 0.1 * trial.seed),
                                                     {}, [{"accuracy": 0.9}], {}, {}, trial))
        return syntextbench_method.combine(trials, config)

    def synbench(self, scorer, config, ceiling=None, **kw):
        self.calls.append(("synbench", getattr(scorer, "name", ceiling), config.n))
        score = 0.9 if ceiling else 0.4 - self.noise(scorer)
        rows = [{"eps": 0.0, "a_t": 0.7, "score": score, "score_corrected": score + 0.1,
                 "score_corrected_stderr": None}, {"eps": 0.2, "a_t": 0.7, "score": score / 2}]
        return synbench_method.Result("fake", rows, {}, {}, {}, config)

    def byod(self, scorer, corpus, config, **kw):
        self.calls.append(("byod", scorer.name))
        extra = {"normalized": 0.3, "normalized_stderr": 0.03, "net_of_null": 0.2, "net_of_null_stderr": 0.02,
                 "per_entropy": 0.1, "per_entropy_stderr": 0.01}
        metric = MetricResult(config.metrics[0], self.noise(scorer), 0.01, 10, {}, [], extra)
        return byod_method.Result(scorer.name, dict.fromkeys(config.metrics, metric), {}, {})

    def task(self, scorer, name, key, **more):
        self.calls.append((name, scorer.name))
        return {key: 0.8 - self.noise(scorer), f"{key}_stderr": 0.02, **more}


def test_every_method_reaches_the_numbers_with_its_errors_and_a_rerun_computes_nothing(tmp_path, monkeypatch,
                                                                                       capsys):
    fake = FakeMethods(monkeypatch)
    models = ["m", "m@noise=0.1", "m@noise=0.2", "other", "third"]
    argv = [f"--models={','.join(models)}", f"--output_dir={tmp_path}", "--syntextbench_trials=2",
            "--verbosity=warning"]
    validate.main(argv)
    result = json.loads((tmp_path / "results.json").read_text())
    record = result["models"][1]  # m@noise=0.1
    assert record["numbers"]["syntextbench"] == pytest.approx(0.45)  # trials 0.4 and 0.5
    assert record["stderr"]["syntextbench"] == pytest.approx(0.05)  # std 0.0707 / sqrt(2)
    assert record["numbers"]["synbench"] == pytest.approx(0.3) and record["numbers"]["synbench_corrected"] == 0.4
    assert record["numbers"]["synbench_ceiling"] == 0.9 and record["synbench_n"] == 20 * 64
    assert ("synbench", "m@noise=0.1", 1280) in fake.calls and ("synbench", 64, 1280) in fake.calls
    assert record["numbers"]["byod_negation_normalized"] == 0.3 and record["stderr"]["byod_word_order_net"] == 0.02
    assert record["stderr"]["probe_tweets"] == 0.02 and record["stderr"]["heldout_bits_per_byte"] == 0.02
    decoders = result["correlations"]["decoders"]
    assert decoders["models"] == ["m", "other", "third"] and decoders["dropped"] == ["m@noise=0.1", "m@noise=0.2"]
    assert {r["proxy"] for r in decoders["rows"]} >= {"synbench_corrected", "byod_negation_normalized"}
    assert "synbench_ceiling" not in {r["proxy"] for r in decoders["rows"]}
    ladder = {r["name"]: r for r in result["ladders"]["decoders"]["rows"]}
    assert ladder["synbench"]["tau"] == pytest.approx(1.0) and ladder["byod_negation"]["tau"] == pytest.approx(-1.0)
    assert "ladder m @noise (known order: m < m@noise=0.1 < m@noise=0.2" in capsys.readouterr().out

    computed = [c for c in fake.calls if c[0] != "scatter"]
    assert fake.calls.count(("scatter", str(tmp_path / "scatter-decoders.png"))) == 1
    validate.main(argv)  # every stage from the cache
    assert [c for c in fake.calls if c[0] != "scatter"] == computed
    assert [r["numbers"] for r in json.loads((tmp_path / "results.json").read_text())["models"]] == [
        r["numbers"] for r in result["models"]]


def test_a_training_run_joins_as_a_ladder_with_its_heldout_loss(tmp_path, monkeypatch, capsys):
    FakeMethods(monkeypatch)
    run = fake_run(tmp_path / "tiny", {0: 8.0, 10: 6.5, 20: 5.0})
    validate.main([f"--ladder_checkpoints={run}", f"--output_dir={tmp_path / 'out'}", "--proxies=synbench",
                   "--tasks=heldout", "--verbosity=warning"])
    result = json.loads((tmp_path / "out" / "results.json").read_text())
    assert [r["numbers"]["trainer_heldout_loss"] for r in result["models"]] == [8.0, 6.5, 5.0]
    trends = result["ladders"]["decoders"]
    assert trends["ladders"]["tiny training steps"]["direction"] == "rises"
    heldout = next(r for r in trends["rows"] if r["name"] == "trainer_heldout_loss")
    assert heldout["tau"] == pytest.approx(1.0) and heldout["follows"]  # the loss falls with training
    tracking = trends["training"]["tiny training steps"]
    assert {(r["proxy"], r["task"]) for r in tracking} >= {("synbench", "trainer_heldout_loss"),
                                                           ("synbench", "heldout_loss")}
    out = capsys.readouterr().out
    assert "across the run's checkpoints" in out and "1 base model" in out


def test_bad_flags_fail_before_any_model_loads(tmp_path, capsys):
    for argv, message in ((["--models=a,b,c", "--proxies=nope"], "--proxies=nope: choose from"),
                          (["--models=a@fp4"], "unknown model variant"), ([], "give the models"),
                          ([f"--ladder_checkpoints={tmp_path}/none"], "does not exist")):
        with pytest.raises(SystemExit):
            validate.main([*argv, f"--output_dir={tmp_path}"])
        assert message in capsys.readouterr().err


def test_pairs_scored_on_the_same_items_are_tested_paired():
    """Two models whose probe differs on few items of a shared test set: the item differences resolve
    what their bootstrap errors alone cannot."""
    rng = np.random.default_rng(0)
    labels = np.repeat([0, 1], 200)
    a = labels.copy()
    a[rng.permutation(400)[:120]] ^= 1  # 70% right
    b = a.copy()
    b[np.flatnonzero(a == labels)[:12]] ^= 1  # the same answers but 12 more wrong: 67%
    rows = []
    for label, predictions in (("m-a", a), ("m-b", b), ("m-c", a)):
        record = _record("dec-d", (0.3, 0.0, 1.0))
        items = realtask.balanced_accuracy_items(predictions, labels)
        record.update(label=label, model=label, base=label, ladder=None)
        record["numbers"]["probe_rt_polarity"] = float(np.mean(items))
        record["stderr"]["probe_rt_polarity"] = 0.023  # the bootstrap's size at n = 400
        record["items"] = {"probe_rt_polarity": items}
        rows.append(record)
    got = validation.resolved(rows)["decoders"]["probe_rt_polarity"]
    assert ["m-a", "m-b"] in got["resolved"] and ["m-a", "m-c"] in got["unresolved"]
    unpaired = validation.resolved([{**r, "items": {}} for r in rows])["decoders"]["probe_rt_polarity"]
    assert unpaired["n_resolved"] == 0  # 0.03 apart with errors of 0.023 each
