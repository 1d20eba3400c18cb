"""No torch at run time: every front end's smallest job (tests.user_jobs, the decoder and the encoder
defaults) runs in a subprocess where torch cannot be imported, and any attempt to import it fails
the test. torch is a test dependency (transformers' models are the parity reference), never a
run-time one: a user's install has none."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests import user_jobs


def test_the_guard_sees_an_import_of_torch():
    """Control: the hidden torch is reported when something imports it, and looks absent to probes."""
    code = user_jobs.NO_TORCH + (
        "import importlib.util; assert importlib.util.find_spec('torch') is None\n"
        "try:\n    import torch.nn\nexcept ModuleNotFoundError:\n    print('refused')\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout.strip() == "refused", done.stderr
    assert user_jobs.TORCH_MARK in done.stderr and "<string>" in done.stderr


@pytest.mark.slow
@pytest.mark.parametrize("job", list(user_jobs.JOBS))
def test_front_end_runs_without_torch(job, tmp_path):
    done = user_jobs.run(job, str(tmp_path / "run"), no_torch=True)
    assert user_jobs.TORCH_MARK not in done.stderr, done.stderr[-4000:]
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    if job not in user_jobs.NO_OUTPUT_DIR:
        assert (tmp_path / "run" / "results.json").is_file()
