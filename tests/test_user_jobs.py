"""tests.user_jobs ends a job only when it stops making progress, never for being slow."""

from __future__ import annotations

import subprocess
import sys

from tests.user_jobs import wait_while_progressing


def _start(tmp_path, code: str):
    log = tmp_path / "job.err"
    with open(log, "w") as err:
        return subprocess.Popen([sys.executable, "-u", "-c", code], stderr=err), str(log)


def test_a_slow_job_that_keeps_writing_runs_to_its_end(tmp_path):
    # 3 s in all, far past the stall time, but a line every 0.3 s
    process, log = _start(tmp_path, "import sys, time\nfor i in range(10):\n    print(i, file=sys.stderr)\n"
                                    "    time.sleep(0.3)\n")
    assert wait_while_progressing([process], [log], stall_s=1.5, poll_s=0.05)
    assert process.returncode == 0 and open(log).read().split() == [str(i) for i in range(10)]


def test_a_silent_job_is_ended_after_the_stall_time(tmp_path):
    process, log = _start(tmp_path, "import sys, time\nprint('started', file=sys.stderr)\ntime.sleep(60)")
    assert not wait_while_progressing([process], [log], stall_s=1.0, poll_s=0.05)
    assert process.returncode is not None and process.returncode < 0  # killed, well before its 60 s
