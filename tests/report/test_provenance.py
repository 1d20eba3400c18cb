"""run_info: what produced a results.json, JSON-able, without collectives, inside and outside git."""

import json
import subprocess
import time
import types

import jax

from lmprobe.report import provenance


def test_run_info_records_command_times_devices_versions_and_extra():
    started = time.time() - 5
    info = provenance.run_info(seed=3, started=started, argv=["prog", "--model=a b"], extra={"note": 1})
    json.dumps(info)  # JSON-able
    assert info["command"]["argv"] == ["prog", "--model=a b"]
    assert info["command"]["line"] == "prog '--model=a b'"
    assert info["started"] == provenance.iso_utc(started) and info["started"].endswith("+00:00")
    assert info["started"] < info["ended"]
    assert info["devices"] == {"platform": "cpu", "kind": jax.local_devices()[0].device_kind,
                               "count": jax.device_count(), "local_count": jax.local_device_count(),
                               "processes": 1}
    assert info["versions"]["jax"] == jax.__version__ and info["versions"]["flax"]
    assert info["seed"] == 3 and info["note"] == 1 and info["hostname"]
    assert info["models"] == [] and info["mesh"] is None and info["sharding"] is None


def test_run_info_takes_models_mesh_and_strategy_from_scorers_and_checkpoints():
    mesh = jax.make_mesh((4, 2), ("data", "model"))
    scorer = types.SimpleNamespace(mesh=mesh, strategy="tp", identity={"name": "m", "dtype": "float32"})
    info = provenance.run_info(scorers=[scorer, types.SimpleNamespace(name="black-box")],
                               checkpoints=[{"name": "vit", "weights_sha256": "ab"}])
    assert info["models"] == [{"name": "m", "dtype": "float32"}, {"name": "black-box"},
                              {"name": "vit", "weights_sha256": "ab"}]
    assert info["mesh"] == {"data": 4, "model": 2} and info["sharding"] == "tp"


def test_default_start_is_stable_within_a_process():
    assert provenance.run_info()["started"] == provenance.run_info()["started"]


def test_git_commit_of_a_checkout_and_none_outside(tmp_path, monkeypatch):
    provenance.git_state.cache_clear()
    commit, _ = provenance.git_state()
    if commit is not None:  # this checkout is a git repository
        assert len(commit) == 40
    fake = tmp_path / "lmprobe" / "__init__.py"
    fake.parent.mkdir()
    fake.write_text("")
    monkeypatch.setattr(provenance.lmprobe, "__file__", str(fake))
    provenance.git_state.cache_clear()
    assert provenance.git_state() == (None, None)  # no .git: nothing run, no failure
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    provenance.git_state.cache_clear()
    assert provenance.git_state() == (None, False)  # a repository without commits
    provenance.git_state.cache_clear()
