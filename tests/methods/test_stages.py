"""The stage registry holds all five methods: SCoPE and MSTemp score a model as stages (through
their methods' run), with their settings taken from the methods' Configs, cached per model."""

from __future__ import annotations

import dataclasses
import math

import pytest

from lmprobe.engine import Scorer
from lmprobe.errors import LmprobeError
from lmprobe.methods import mstemp, scope, stages
from lmprobe.methods.result import Number


def test_every_method_is_a_stage():
    assert {"syntextbench", "synbench", "scope", "mstemp", *stages.BYOD} <= set(stages.STAGES)
    assert stages.expand(["byod", "scope", "mstemp"]) == (*stages.BYOD, "scope", "mstemp")


def test_settings_nest_the_methods_configs_and_their_checks():
    s = stages.Settings.of({"scope_trials": 2, "mstemp_templates": 3, "seed": 4})
    assert (s.scope.trials, s.mstemp.n_templates, s.scope.seed, s.mstemp.seed) == (2, 3, 4, 4)
    assert stages.Settings.of(s.flat()) == s
    with pytest.raises(LmprobeError, match="mstemp settings"):
        stages.Settings.of({"mstemp_templates": 0}).check()
    with pytest.raises(LmprobeError, match="scope_reference=NAME"):
        stages.load_inputs(["scope"], stages.Settings())


def test_scope_and_mstemp_stages_score_a_model_and_a_rerun_reads_the_cache(tiny_smollm2_dir, tiny_minilm_dir,
                                                                           tmp_path, monkeypatch):
    base = stages.Settings()
    s = stages.Settings(
        scope=dataclasses.replace(base.scope, n_bootstrap=20), scope_reference=tiny_smollm2_dir, scope_texts=6,
        mstemp=mstemp.Config(n_templates=1, m_samples=1, repeats=2, tau=-1.0, max_new_tokens=6, tagger="wordnet"),
        mstemp_evaluator=tiny_smollm2_dir, mstemp_filter=tiny_minilm_dir, mstemp_seeds=6, batch_size=8)
    inputs = stages.load_inputs(["scope", "mstemp"], s)
    target = Scorer.load(f"{tiny_smollm2_dir}@noise=0.5")
    numbers, seconds = stages.run(["scope", "mstemp"], target, s, inputs, name="noisy", run_dir=str(tmp_path))
    assert set(seconds) == {"scope", "mstemp"}
    assert set(scope.NAMES.values()) <= set(numbers)
    assert {"mstemp_fair_drop", "mstemp_fair_baseline_accuracy", "mstemp_fair_generated_accuracy"} <= set(numbers)
    for name, number in numbers.items():
        assert isinstance(number, Number) and math.isfinite(number.value), name
    assert numbers["mstemp_fair_drop"].value == pytest.approx(
        numbers["mstemp_fair_baseline_accuracy"].value - numbers["mstemp_fair_generated_accuracy"].value)
    assert 0.0 <= numbers["scope_hard"].value <= 1.0
    assert stages.is_proxy("scope_hard") and stages.is_proxy("mstemp_fair_drop")
    assert stages.is_reference("mstemp_fair_baseline_accuracy")

    def recompute(*args, **kwargs):
        raise AssertionError("a rerun with the same model and settings computes nothing")

    monkeypatch.setattr(stages, "run_stage", recompute)
    again, _ = stages.run(["scope", "mstemp"], target, s, inputs, name="noisy", run_dir=str(tmp_path))
    assert again == numbers
