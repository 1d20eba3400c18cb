"""lmprobe.evaluate.measure: which models validate measures (names placed on ladders of known order,
a training run's checkpoints as a ladder by step) and one model's record from its stages' numbers
(the stages faked: their own tests cover them)."""

from __future__ import annotations

import json
import os
import types

import pytest

from lmprobe.errors import LmprobeError
from lmprobe.evaluate import FALLS, RISES
from lmprobe.evaluate import measure as measure_lib
from lmprobe.methods import stages as stages_lib
from lmprobe.methods.result import Number
from lmprobe.report import validation


def test_model_names_are_placed_on_ladders_of_known_order():
    assert measure_lib.model_entry("m@noise=0.1") == measure_lib.Entry("m@noise=0.1", "m@noise=0.1", "m",
                                                                       ("m @noise", 0.1, FALLS))
    assert measure_lib.model_entry("m@int8@drop-layer=2@drop-layer=5").ladder == ("m@int8 @drop-layer", 2.0, FALLS)
    assert measure_lib.model_entry("m@int8").ladder is None and measure_lib.model_entry("m@int8").base == "m"
    with pytest.raises(LmprobeError, match="unknown model variant"):
        measure_lib.model_entry("m@fp4")
    with pytest.raises(LmprobeError, match="unknown model variant"):  # before any checkpoint is looked for
        measure_lib.entries(["m", "m@fp4"], "/nonexistent/run")


def fake_run(root, losses: dict) -> str:
    """lmprobe Orbax step directories (meta/metadata and params/) as discover and orbax_io.find see them."""
    for step, loss in losses.items():
        os.makedirs(root / "checkpoints" / str(step) / "params")
        os.makedirs(root / "checkpoints" / str(step) / "meta")
        (root / "checkpoints" / str(step) / "meta" / "metadata").write_text(json.dumps(
            {"format": "lmprobe-orbax", "hf_config": {}, "metadata": {"heldout_loss": loss}}))
    return str(root / "checkpoints")


def test_a_training_run_is_a_ladder_by_step_and_its_last_checkpoint_stands_for_it(tmp_path):
    run = fake_run(tmp_path / "myrun", {100: 5.0, 8: 7.5, 32: 6.1})
    got = measure_lib.checkpoint_entries(run)
    assert [(e.label, e.ladder, e.trainer_heldout_loss) for e in got] == [
        ("myrun@step=8", ("myrun training steps", 8, RISES), 7.5),
        ("myrun@step=32", ("myrun training steps", 32, RISES), 6.1),
        ("myrun@step=100", ("myrun training steps", 100, RISES), 5.0)]
    assert [e.label for e in measure_lib.entries(["m"], run)] == ["m", *(e.label for e in got)]
    records = [{"label": e.label, "base": e.base, "ladder": list(e.ladder)} for e in got]
    assert validation.base_points(records) == ([2], ["myrun: its last checkpoint myrun@step=100 stands for the run"])
    assert validation.find_ladders(records)[0]["myrun training steps"]["models"] == [e.label for e in got]
    assert measure_lib.run_name(f"{tmp_path}/myrun/checkpoints/*") == "myrun"
    assert measure_lib.run_name(f"{tmp_path}/myrun/ckpt") == "myrun" and measure_lib.run_name("out/run7") == "run7"


def test_a_fixed_synbench_n_across_widths_is_refused():
    settings = stages_lib.Settings(synbench_n=2048)
    measure_lib.check_synbench_widths({"a": 384, "b": 384}, "encoders", settings)
    measure_lib.check_synbench_widths({"a": 384, "b": 768}, "encoders", stages_lib.Settings())  # n per width
    with pytest.raises(LmprobeError, match=r"a \(width 384, n / width 5.3\), b \(width 768, n / width 2.7\)"):
        measure_lib.check_synbench_widths({"a": 384, "b": 768}, "encoders", settings)


def test_a_record_splits_each_number_into_value_error_df_and_items(monkeypatch, tmp_path):
    calls = []

    def run(stages, scorer, settings, inputs, *, name, run_dir, progress):
        calls.append((stages, name, run_dir))
        return {"syntextbench": Number(0.5, 0.02, 2), "probe_rt_polarity": Number(0.8, None, None, [1, 0, 1]),
                "heldout_loss": Number(3.0)}, {"syntextbench": 1.5}

    monkeypatch.setattr(stages_lib, "run", run)
    scorer = types.SimpleNamespace(is_decoder=True, config=types.SimpleNamespace(hidden_size=64))
    entry = measure_lib.Entry("runs/x/100", "x@step=100", "x", ("x training steps", 100, RISES), 2.5)
    widths = {}
    record = measure_lib.measure(entry, scorer, ("syntextbench", "probes"), stages_lib.Settings(), None, str(tmp_path),
                                 widths, load_s=0.25)
    assert calls == [(("syntextbench", "probes"), "runs/x/100", str(tmp_path))]
    assert record == {"model": "runs/x/100", "label": "x@step=100", "base": "x",
                      "ladder": ["x training steps", 100, RISES], "group": "decoders", "width": 64, "synbench_n": None,
                      "numbers": {measure_lib.TRAINER_HELDOUT_LOSS: 2.5, "syntextbench": 0.5, "probe_rt_polarity": 0.8,
                                  "heldout_loss": 3.0},
                      "stderr": {"syntextbench": 0.02}, "df": {"syntextbench": 2},
                      "items": {"probe_rt_polarity": [1, 0, 1]}, "seconds": {"syntextbench": 1.5}, "load_s": 0.25}
    assert widths == {"decoders": {"x@step=100": 64}}
