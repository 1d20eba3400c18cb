"""No torch (nor any other test-only package) at run time: every front end's smallest job
(tests.user_jobs, the decoder and the encoder defaults) runs in a subprocess where the test extra's
packages cannot be imported, and any attempt to import one fails the test. torch is a test
dependency (transformers' models are the parity reference), never a run-time one: a user's install
has none, nor lm_eval, nltk, scikit-learn... (those a job may try, as an optional package, and must
run without). This is where the jobs run (started with the session's first test, beside the rest of the
suite: tests/conftest.py); CI's user-install step runs only their install check
(tests.user_jobs --install_check)."""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys

import numpy as np
import pytest

from tests import user_jobs


def test_the_guard_sees_an_import_of_torch():
    """Control: the hidden torch is reported when something imports it, and looks absent to probes."""
    code = user_jobs.no_torch_code() + (
        "import importlib.util; assert importlib.util.find_spec('torch') is None\n"
        "try:\n    import torch.nn\nexcept ModuleNotFoundError:\n    print('refused')\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout.strip() == "refused", done.stderr
    assert user_jobs.TORCH_MARK in done.stderr and "<string>" in done.stderr


def test_the_guard_hides_the_test_extra_and_nothing_a_user_installs():
    hidden = user_jobs.test_extra_modules()
    assert {"torch", "lm_eval", "nltk", "sklearn", "pytest", "hypothesis", "accelerate"} <= set(hidden)
    assert not {"jax", "flax", "numpy", "scipy", "transformers", "yaml", "lmprobe", "experiments"} & set(hidden)
    code = user_jobs.no_torch_code() + (
        "import importlib.util, yaml, jax\nassert importlib.util.find_spec('sklearn') is None\n"
        "try:\n    import lm_eval.api\nexcept ModuleNotFoundError:\n    print('refused')\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout.strip() == "refused", done.stderr
    assert user_jobs.TORCH_MARK not in done.stderr  # an optional package may be tried: only torch is marked


def finished(job, user_jobs_running):
    """``job``'s output folder, once it ran to the end with the test extra hidden: the session started the jobs
    its tests name (``user_jobs`` markers) with its first test (tests/conftest.py), and this waits for it."""
    done = user_jobs_running.result(job)
    assert user_jobs.TORCH_MARK not in done.stderr, done.stderr[-4000:]
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    out = pathlib.Path(user_jobs_running.output_dir(job))
    if job not in user_jobs.NO_OUTPUT_DIR:
        assert (out / user_jobs.WRITES.get(job, "results.json")).is_file()
    return out


@pytest.mark.slow
@pytest.mark.parametrize("job", [pytest.param(job, marks=pytest.mark.user_jobs(job)) for job in user_jobs.JOBS])
def test_front_end_runs_without_torch(job, user_jobs_running):
    finished(job, user_jobs_running)


@pytest.mark.slow
@pytest.mark.user_jobs("syntextbench")
def test_syntextbench_compares_an_encoder_and_a_decoder_with_in_context_accuracy_and_baselines(user_jobs_running):
    out = finished("syntextbench", user_jobs_running)
    comparison = json.loads((out / "comparison.json").read_text())
    assert [row["model"] for row in comparison] == ["minilm-l6", "smollm2-135m"]
    smol = json.loads((out / "smollm2-135m" / "results.json").read_text())
    assert all(0 <= level["icl_accuracy"] <= 1 for level in smol["levels"])
    assert smol["baselines"]["p"] == 0.2 and np.isfinite(smol["baselines"]["mdl"])
    minilm = json.loads((out / "minilm-l6" / "results.json").read_text())
    assert "icl_accuracy" not in minilm["levels"][0]  # an encoder has none
    assert (out / "goodness.png").exists() and (out / "minilm-l6" / "goodness.png").exists()
