"""lmprobe's Orbax checkpoints: save -> restore bit for bit onto a sharded mesh, steps, configs from
metadata, identity, the same scores as the HF directory they came from, and clear errors."""

import json
import os
import re

import jax
import numpy as np
import pytest
from flax import nnx

from lmprobe.checkpoints import identity, load
from lmprobe.checkpoints.model_config import hf_config
from lmprobe.checkpoints.orbax_io import save, steps
from lmprobe.engine import Scorer
from lmprobe.engine.mesh import make_mesh, placement
from lmprobe.errors import CheckpointError
from tests.engine.conftest import tiny_llama_dir  # noqa: F401  (the fixture)

pytestmark = pytest.mark.multi_device  # meshes over several of the 8 CPU devices


@pytest.fixture(scope="module")
def saved(tiny_llama_dir, tmp_path_factory):  # noqa: F811
    """The tiny Llama saved at steps 10 and 20 (step 20's weights scaled), from a sharded model."""
    config = json.load(open(os.path.join(tiny_llama_dir, "config.json")))
    src = load(str(tiny_llama_dir), place=placement(make_mesh(2), "fsdp"))
    root = tmp_path_factory.mktemp("orbax") / "run"
    save(root, 10, src.model, hf_config=config, tokenizer=src.tokenizer, metadata={"loss": 1.5})
    state = nnx.state(src.model, nnx.Param)
    doubled = jax.tree.map(lambda a: a * 2, state)
    nnx.update(src.model, doubled)
    path = save(root, 20, src.model, hf_config=config, metadata={"loss": 1.0})
    return root, path, config


def _params(model) -> dict:
    return {k: v.get_value() for k, v in nnx.to_flat_state(nnx.state(model, nnx.Param))}


def test_steps_layout_and_config(saved):
    root, path, config = saved
    assert steps(root) == [10, 20] and path == os.path.join(str(root), "20")
    assert steps(root / "nothing") == []
    assert sorted(os.listdir(root)) == ["10", "20", "tokenizer"]  # tokenizer once, no temporary left
    assert hf_config(str(root))[0] == config and hf_config(path)[0] == config
    with pytest.raises(CheckpointError, match=r"step 20 is already saved in '.*run': save under a new step"):
        save(root, 20, load(path, tokenizer=False).model, hf_config=config)
    with pytest.raises(CheckpointError, match="needs the model's config.json dict"):
        save(root, 30, load(path, tokenizer=False).model, hf_config={})


def test_round_trip_bit_for_bit_onto_planned_shardings(saved, tiny_llama_dir):  # noqa: F811
    root, _, _ = saved
    place = placement(make_mesh(4), "tp")
    hf = _params(load(str(tiny_llama_dir), tokenizer=False).model)
    got = load(str(root / "10"), tokenizer=False, place=place)
    assert got.checkpoint.orbax.step == 10
    for key, array in _params(got.model).items():
        np.testing.assert_array_equal(np.asarray(array), np.asarray(hf[key]), err_msg=str(key))
        axes = nnx.to_flat_state(nnx.state(got.model, nnx.Param))
        assert array.sharding == place.sharding(array.shape, dict(axes)[key].get_metadata()["axes"]), key
    latest = load(str(root), tokenizer=False)  # the root: its latest step
    assert latest.checkpoint.orbax.step == 20
    for key, array in _params(latest.model).items():
        np.testing.assert_array_equal(np.asarray(array), 2 * np.asarray(hf[key]))


def test_restore_casts_to_the_requested_dtype(saved):
    import jax.numpy as jnp

    root, _, _ = saved
    got = load(str(root / "10"), tokenizer=False, dtype=jnp.bfloat16)
    assert {a.dtype for a in _params(got.model).values()} == {jnp.dtype(jnp.bfloat16)}


def test_identity_names_the_step_and_changes_with_weights(saved):
    root, _, _ = saved
    a, b = (identity(load(str(root / s), tokenizer=False).checkpoint) for s in ("10", "20"))
    assert a["format"] == b["format"] == "orbax" and (a["step"], b["step"]) == (10, 20)
    assert a["weights_sha256"] != b["weights_sha256"] and a["tokenizer_sha256"] == b["tokenizer_sha256"] is not None


def test_scorer_load_scores_like_the_hf_directory(saved, tiny_llama_dir):  # noqa: F811
    root, _, _ = saved
    texts = ["w3 w4 w5 w6 w7", "w10 w11 w12"]
    want = Scorer.load(str(tiny_llama_dir), dtype="float32", batch_size=2).score(texts)
    got = Scorer.load(str(root / "10"), dtype="float32", batch_size=2, model_parallel=2).score(texts)
    np.testing.assert_allclose(got.nll, want.nll, rtol=1e-5)


def test_bad_directories_say_what_was_looked_for(tmp_path, saved):
    (tmp_path / "junk.txt").write_text("x")
    with pytest.raises(CheckpointError, match=r"has no config.json, nor any checkpoint.*junk\.txt.*Orbax"):
        load(str(tmp_path))
    root, _, config = saved
    bad = {**config, "hidden_size": 32, "num_attention_heads": 2, "num_key_value_heads": 1}
    meta = root / "20" / "meta" / "metadata"
    original = meta.read_text()
    try:
        meta.write_text(json.dumps({**json.loads(original), "hf_config": bad}))
        with pytest.raises(CheckpointError, match=r"parameter '.*' in .* has shape .* implies"):
            load(str(root), tokenizer=False)
    finally:
        meta.write_text(original)


def test_save_refuses_what_it_cannot_load_back(tmp_path, saved):
    """A CallableLM (or a config of another family) would save and never load: refused, pointing to --model_fn."""
    import jax.numpy as jnp

    from lmprobe.models import CallableLM

    model = CallableLM(lambda p, ids, mask: p["w"][ids], {"w": jnp.ones((8, 8))}, max_length=16)
    with pytest.raises(CheckpointError, match=r"could not be loaded back.*orbax's standard API.*--model_fn="):
        save(tmp_path / "run", 1, model, hf_config={"model_type": "callable"})
    _, _, config = saved
    with pytest.raises(CheckpointError, match="CallableLM saved with model_type 'llama' could not be loaded back"):
        save(tmp_path / "run", 1, model, hf_config=config)
    assert not (tmp_path / "run").exists()


def test_unfinished_and_damaged_steps_are_one_error_naming_them(saved, tmp_path):
    """A step orbax has not finished (no commit_success.txt where its other steps have one), arrays cut
    short or missing: one CheckpointError naming the step and the cause, and nothing else on stderr (in
    a process of its own: the reads orbax abandons when one fails print tracebacks at random moments,
    which pytest's own hooks would catch; 10 tries: without lmprobe's hooks, most such runs print some)."""
    import shutil
    import subprocess
    import sys
    import textwrap

    from tests.engine.test_multiprocess import REPO, _env

    root, _, _ = saved
    run = tmp_path / "run"
    shutil.copytree(root, run)
    (run / "20" / "commit_success.txt").unlink()
    assert steps(run) == [10]
    with pytest.raises(CheckpointError, match=r"Orbax step '.*/20' is not finished \(it has no commit_success.txt"):
        load(str(run / "20"), tokenizer=False)
    assert load(str(run), tokenizer=False).checkpoint.orbax.step == 10  # the latest finished step

    shutil.copytree(run / "10", run / "30")
    data = max((p for p in (run / "10" / "params").rglob("*") if p.is_file()), key=lambda p: p.stat().st_size)
    with open(data, "r+b") as f:
        f.truncate(1000)
    shutil.rmtree(run / "30" / "params")
    (run / "30" / "params").mkdir()
    paths = [str(run / "10")] * 10 + [str(run / "30")]
    code = textwrap.dedent(f"""
        import gc, time
        from lmprobe.checkpoints import load
        for path in {paths}:
            try:
                load(path, tokenizer=False)
            except Exception as e:
                print(type(e).__name__, e)
        time.sleep(1)
        gc.collect()
        """)
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=_env(1), capture_output=True, text=True,
                          timeout=300)
    lines = done.stdout.strip().splitlines()
    assert len(lines) == 11 and all(line.startswith("CheckpointError Orbax checkpoint") for line in lines), lines
    assert all(re.search(r"'.*/10/params' cannot be read \(ValueError: OUT_OF_RANGE.*: it is incomplete or damaged",
                         line) for line in lines[:10]), lines
    assert "'" + str(run / "30" / "params") + "' has no _METADATA (the arrays' metadata)" in lines[10]
    loader = r"\S+: Orbax checkpoint step \d+ \(.*\)"  # the loader's line per step
    noise = [line for line in done.stderr.splitlines() if not re.fullmatch(loader, line)]
    assert done.returncode == 0 and not noise, done.stderr[-3000:]
