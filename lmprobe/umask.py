"""The process's umask, read without changing it, and the mode a new file would get from it.

``os.umask`` can only read the mask by setting another: while it is 0, a file another thread creates
is world-writable. Linux shows the mask in /proc/self/status ('Umask:'); elsewhere a probe file, created
with mode 0o777 in a fresh temporary folder, shows which bits the mask takes away.
"""

from __future__ import annotations

import os
import shutil
import tempfile


def umask() -> int:
    """The process's file mode creation mask, read without changing it."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    folder = tempfile.mkdtemp(prefix=".lmprobe-umask-")
    try:
        probe = os.path.join(folder, "probe")
        os.close(os.open(probe, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o777))
        return 0o777 & ~os.stat(probe).st_mode
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def usual_mode(path, *, directory: bool = False) -> None:
    """Give ``path`` the mode open() (a folder: mkdir) would have given it under the umask: mkstemp and
    mkdtemp create 0600 / 0700."""
    os.chmod(path, (0o777 if directory else 0o666) & ~umask())
