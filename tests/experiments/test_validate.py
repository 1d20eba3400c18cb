"""experiments.validate end to end on a tiny random Llama and its noise ladder, with the real
labelled data (installed by the README set-up; skipped where it is not)."""

from __future__ import annotations

import json
import os

import pytest

from experiments import validate
from lmprobe.data import labelled

pytestmark = pytest.mark.skipif(not all(labelled.installed(n) for n in labelled.NAMED),
                                reason="real labelled data not installed (README set-up: experiments.assets)")

SMALL = ["--syntextbench_n=200", "--syntextbench_levels=0,0.5", "--synbench_n=80", "--synbench_scales=0.5,2",
         "--byod_examples=6", "--probe_train=40", "--probe_test=30", "--zero_shot_examples=12", "--prose_texts=3",
         "--prose_chars=200", "--bootstrap=50", "--batch_size=8", "--verbosity=warning"]


def _run(tmp_path, models, capsys):
    validate.main([f"--models={','.join(models)}", f"--output_dir={tmp_path}", *SMALL])
    return json.loads((tmp_path / "results.json").read_text()), capsys.readouterr().out


def test_every_proxy_against_every_task_and_a_rerun_computes_nothing(tiny_llama_dir, tmp_path, capsys):
    models = [str(tiny_llama_dir), f"{tiny_llama_dir}@noise=0.3", f"{tiny_llama_dir}@drop-layer=1"]
    result, out = _run(tmp_path, models, capsys)
    assert [r["model"] for r in result["models"]] == models
    numbers = result["models"][0]["numbers"]
    expected = {"syntextbench", "synbench", "synbench_eps0.2", *(f"byod_{m}" for m in validate.BYOD_METRICS),
                "probe_rt_polarity", "probe_tweets", "zero_shot_rt_polarity", "zero_shot_tweets",
                "prose_bits_per_byte"}
    assert set(numbers) == expected
    assert 0 <= numbers["probe_rt_polarity"] <= 1 and numbers["prose_bits_per_byte"] > 0
    table = result["correlations"]["decoders"]
    assert table["models"] == models
    pairs = {(row["proxy"], row["task"]) for row in table["rows"]}
    assert len(pairs) == 7 * 5 and all(row["n"] <= 3 for row in table["rows"])
    assert (tmp_path / "scatter-decoders.png").stat().st_size > 0
    assert "proxy vs real task" in out and "results in" in out

    cached = sorted(os.listdir(tmp_path / "models"))
    again, _ = _run(tmp_path, models, capsys)  # every stage from the cache: same numbers, no new files
    assert [r["numbers"] for r in again["models"]] == [r["numbers"] for r in result["models"]]
    assert sorted(os.listdir(tmp_path / "models")) == cached


def test_synbench_with_fewer_samples_than_dimensions_is_refused(tiny_llama_dir, tmp_path, capsys):
    # n <= width: the plug-in classifier overfits and the score is 0 for any model, the identity included
    argv = [f"--models={tiny_llama_dir},{tiny_llama_dir}@noise=0.1,{tiny_llama_dir}@noise=0.2", "--proxies=synbench",
            "--tasks=probes", f"--output_dir={tmp_path}", *SMALL, "--synbench_n=64"]
    with pytest.raises(SystemExit):
        validate.main(argv)
    assert "--synbench_n=64 is not above" in capsys.readouterr().err


def test_bad_flags_fail_before_any_model_loads(tmp_path, capsys):
    for argv, message in ((["--models=a,b,c", "--proxies=nope"], "--proxies=nope: choose from"),
                          (["--models=a@fp4"], "unknown model variant"), ([], "give the models")):
        with pytest.raises(SystemExit):
            validate.main([*argv, f"--output_dir={tmp_path}"])
        assert message in capsys.readouterr().err
