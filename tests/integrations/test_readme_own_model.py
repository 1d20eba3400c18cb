"""The README's "your own model" example, executed as printed: a plain-JAX GPT trained with optax,
saved with orbax's standard API, probed in the loop, then swept with ``lmprobe sweep --model_fn``;
the sweep's held-out loss per step equals the callback's (the same texts, the same function)."""

import json
import re
import shlex
import sys
import time

import pytest

from lmprobe.cli import sweep
from lmprobe.integrations.in_loop import FILENAME, read_rows
from tests.integrations.test_in_loop import ROOT


def blocks(kind: str) -> list[str]:
    with open(f"{ROOT}/README.md", encoding="utf-8") as f:
        return re.findall(rf"```{kind}\n(.*?)```", f.read(), re.S)


def test_readme_own_model_trains_probes_and_sweeps(tmp_path, monkeypatch, capsys):
    module = [b for b in blocks("python") if b.startswith("# mygpt.py")]
    script = [b for b in blocks("python") if "import mygpt" in b]
    command = [b for b in blocks("bash") if "--model_fn=mygpt:build" in b]
    if not (module and script and command):
        pytest.fail("README.md lacks the 'your own model' example: mygpt.py, its training script and the sweep")
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "mygpt", raising=False)
    (tmp_path / "mygpt.py").write_text(module[0])
    scope = {}
    start = time.perf_counter()
    exec(compile(script[0], "README.md", "exec"), scope)
    trained = time.perf_counter() - start
    argv = shlex.split(command[0].replace("\\\n", " "))
    assert argv[:2] == ["lmprobe", "sweep"]
    start = time.perf_counter()
    sweep.main(argv[2:])
    swept = time.perf_counter() - start
    looped = read_rows(str(tmp_path / "runs" / "mygpt" / FILENAME))
    rows = json.loads((tmp_path / "runs" / "mygpt-sweep" / "results.json").read_text())["rows"]
    assert [r["step"] for r in looped] == [r["step"] for r in rows] == [0, 5, 10]
    assert looped[0]["traces"] > 0 and len({r["traces"] for r in looped}) == 1  # compiled on the first call only
    for mine, theirs in zip(rows, looped):
        assert mine["metrics"]["heldout_loss"] == pytest.approx(theirs["heldout_loss"], rel=1e-5)
        assert mine["metrics"]["heldout_bits_per_byte"] == pytest.approx(theirs["heldout_bits_per_byte"], rel=1e-5)
    assert looped[0]["heldout_loss"] > looped[-1]["heldout_loss"]  # training lowers it
    assert {"byod_negation", "byod_word_order"} <= set(rows[0]["metrics"]) & set(looped[0])
    assert capsys.readouterr().out.count("train loss") == 3
    state, batch = scope["state"], scope["batches"][0]
    scope["train_step"](state, batch)[1].block_until_ready()
    begin = time.perf_counter()
    for _ in range(3):
        scope["train_step"](state, batch)[1].block_until_ready()
    step_s = (time.perf_counter() - begin) / 3
    calls = ", ".join(f"{r['seconds']:.1f}" for r in looped)
    per_step = ", ".join(f"{r['seconds']['total']:.1f}" for r in rows)
    print(f"\nREADME own model: train step {step_s:.2f} s; callback calls {calls} s; sweep per step {per_step} s; "
          f"training script {trained:.1f} s, sweep {swept:.1f} s", file=sys.stderr)
