"""The memory plan: parameter bytes per device, shipped configs' sizes, the largest-batch search,
the no-fit errors, and that planning never opens a tensor file. Tiny configs only (compiles are
the cost); the 8 CPU devices come from tests/conftest.py."""

import json
import os
import subprocess
import sys

import jax.numpy as jnp
import numpy as np
import pytest

from lmprobe.checkpoints.configs import names, path_of
from lmprobe.checkpoints.model_config import hf_config
from lmprobe.engine import memory
from lmprobe.engine.mesh import make_mesh
from lmprobe.errors import LmprobeError
from lmprobe.planning import plan as P

L, D, V, T, F = 2, 64, 256, 128, 256  # tiny GPT-2: layers, width, vocab, positions, MLP width
TINY = dict(model_type="gpt2", n_layer=L, n_embd=D, n_head=4, vocab_size=V, n_positions=T)


MESH = make_mesh(1)  # data=8 x model=1, one object: compiled steps are memoized per mesh
_Fresh = P.Planner


@pytest.fixture(scope="module")
def tiny_planner():
    return P.Planner(TINY, jnp.float32, "tiny")


@pytest.fixture
def shared_compiles(monkeypatch):
    """plan() and check_fits() of TINY in float32 share one planner, so one compile memo."""
    planners = {}

    def planner(hf, dtype, where, target=None):
        key = (json.dumps(hf, sort_keys=True), jnp.dtype(dtype).name, target)
        if key not in planners:
            planners[key] = _Fresh(hf, dtype, where, target)
        return planners[key]

    monkeypatch.setattr(P, "Planner", planner)
    monkeypatch.setattr(memory, "Planner", planner)


def hand_count(strategy: str, data: int, model: int, itemsize: int = 4) -> int:
    """Bytes per device of the tiny GPT-2, counted by what each weight is split over."""
    matrices = L * (D * 3 * D + D * D + D * F + F * D) + V * D  # embed x (heads | mlp | vocab)
    embed_only = L * 6 * D + 2 * D + T * D  # LayerNorms, biases over embed, ln_f, positions
    model_only = L * (3 * D + F)  # biases over heads / mlp
    if strategy == "fsdp":  # embed over 'data', heads / mlp / vocab over 'model'
        elements = matrices // (data * model) + embed_only // data + model_only // model
    else:  # tp: embed replicated
        elements = matrices // model + embed_only + model_only // model
    return elements * itemsize


@pytest.mark.parametrize("strategy", ["fsdp", "tp"])
@pytest.mark.parametrize("model_parallel", [1, 2, 4])  # 4 heads: whole heads per device
def test_param_bytes_per_device_match_a_hand_count(tiny_planner, strategy, model_parallel):
    mesh = make_mesh(model_parallel)
    data = 8 // model_parallel
    assert tiny_planner.bytes_per_device(mesh, strategy) == hand_count(strategy, data, model_parallel)
    assert tiny_planner.total_bytes == hand_count("tp", 1, 1)


def test_bfloat16_halves_the_bytes():
    planner = P.Planner(TINY, jnp.bfloat16, "tiny")
    assert planner.bytes_per_device(make_mesh(2), "fsdp") == hand_count("fsdp", 4, 2, itemsize=2)


def test_parse_bytes():
    assert P.parse_bytes("16GiB") == 16 * 2**30
    assert P.parse_bytes("32 GiB") == 32 * 2**30
    assert P.parse_bytes("80GB") == 80 * 10**9
    assert P.parse_bytes("80e9") == 80 * 10**9
    assert P.parse_bytes("512MiB") == 2**29
    with pytest.raises(LmprobeError, match="`hbm=lots`"):
        P.parse_bytes("lots")


# Published parameter counts (model cards / papers; BERT-style counts include a pooler lmprobe
# does not build, which the 2% tolerance covers).
PUBLISHED = {
    "opt-125m": 125.2e6, "opt-350m": 331.2e6, "opt-1.3b": 1.316e9, "opt-2.7b": 2.651e9,
    "opt-6.7b": 6.658e9, "opt-13b": 12.853e9, "opt-30b": 29.97e9,
    "gpt2": 124.4e6, "gpt2-medium": 354.8e6, "gpt2-large": 774.0e6, "gpt2-xl": 1.558e9,
    "pythia-70m": 70.43e6, "pythia-160m": 162.3e6, "pythia-410m": 405.3e6, "pythia-1b": 1.012e9,
    "pythia-1.4b": 1.415e9, "pythia-2.8b": 2.775e9, "pythia-6.9b": 6.857e9, "pythia-12b": 11.846e9,
    "gpt-neo-125m": 125.2e6, "gpt-neo-1.3b": 1.316e9, "gpt-neo-2.7b": 2.651e9,  # nominally 2.7B
    "llama-2-7b": 6.738e9, "llama-2-13b": 13.016e9,
    "bert-base-uncased": 110e6, "bert-large-uncased": 335e6, "roberta-base": 125e6, "roberta-large": 355e6,
}


def test_every_paper_model_ships_a_config():
    assert sorted(PUBLISHED) == names()


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_shipped_configs_build_abstractly_with_published_sizes(name, monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))  # nothing cached: the shipped config is used
    config, source = hf_config(name, offline=True)
    assert source == path_of(name)
    planner = P.Planner(config, jnp.bfloat16, source)
    assert planner.num_params == pytest.approx(PUBLISHED[name], rel=0.02)


def test_largest_batch_search_is_monotone_and_fits(shared_compiles):
    """Rows never grow with the bucket length, and an answer compiles within the memory."""
    hbm = 3 * 2**20
    p = P.plan(TINY, mesh=MESH, batch_size=2, max_length=64, buckets=(16,), hbm_bytes=hbm)
    rows = [b.rows for b in p.buckets]
    assert [b.length for b in p.buckets] == [16, 64]
    assert rows[0] >= rows[1] >= 1
    assert all(b.global_rows == 8 * b.rows and b.compiles <= 2 + memory._REFINE for b in p.buckets)
    assert all(b.peak_bytes <= hbm for b in p.buckets)  # each from a compile at b.rows
    first = p.buckets[0]  # and a new compile (not the search's memo) agrees
    assert _Fresh(TINY, jnp.float32, "tiny").step(MESH, "fsdp", first.rows, first.length).peak_bytes <= hbm
    # the step's arguments are exactly the parameter shards and the two [rows, length] int32 inputs
    s = p.step_memory
    assert (s.rows, s.global_rows, s.length) == (2, 16, 64)
    assert s.argument_bytes == p.param_bytes_per_device + 2 * s.rows * s.length * 4
    assert "largest batch" in p.table() and "16 global" in p.table()


def test_no_fit_names_model_parallel_without_compiling():
    total = hand_count("tp", 1, 1)  # tp on data=8 x model=1: every weight replicated
    with pytest.raises(LmprobeError, match=r"`model_parallel=2` ") as err:
        memory.check_fits(TINY, mesh=MESH, strategy="tp", hbm_bytes=int(total * 0.6))
    assert "does not fit" in str(err.value) and "`sharding=fsdp`" in str(err.value)
    with pytest.raises(LmprobeError, match=r"`dtype=bfloat16`"):  # fsdp over all 8 is not enough
        memory.check_fits(TINY, mesh=MESH, strategy="fsdp", hbm_bytes=hand_count("fsdp", 8, 1) - 1)


def test_fewer_rows_at_the_longest_bucket_cap_the_tokens_and_a_given_cap_is_kept(shared_compiles):
    """A long context (the plan's 64 tokens here; 32k for gemma3 on an H200) where fewer rows than the batch fit:
    the plan caps the tokens a batch holds instead of refusing. A cap the caller gave that does not fit is an
    error naming batch_size."""
    one_row = P.plan(TINY, mesh=MESH, batch_size=1, max_length=64, search=False).step_memory.peak_bytes
    hbm = int(one_row * 1.2)
    fit = memory.check_fits(TINY, mesh=MESH, batch_size=4, max_length=64, hbm_bytes=hbm)
    rows = fit.max_tokens // 64
    assert fit.max_tokens == rows * 64 and 1 <= rows < 4
    assert fit.step_memory.rows == rows and fit.step_memory.peak_bytes <= hbm
    assert P.plan(TINY, mesh=MESH, batch_size=rows + 1, max_length=64, search=False).step_memory.peak_bytes > hbm
    assert memory.check_fits(TINY, mesh=MESH, batch_size=4, max_length=64, hbm_bytes=4 * one_row).max_tokens is None
    with pytest.raises(LmprobeError, match=r"`batch_size=\d+` ") as err:
        memory.check_fits(TINY, mesh=MESH, batch_size=4, max_length=64, max_tokens=256, hbm_bytes=hbm)
    assert "4 rows per device x 64 tokens" in str(err.value)


def test_max_tokens_caps_the_rows_as_the_scorer_does(shared_compiles):
    p = P.plan(TINY, mesh=MESH, batch_size=4, max_length=64, max_tokens=128, search=False)
    assert p.step_memory.rows == 2 and p.step_memory.global_rows == 16


def test_plan_devices_and_dtype():
    import jax

    assert P.plan_devices(None) == (jax.devices(), False)
    assert P.plan_devices(4) == (jax.devices("cpu")[:4], True)
    with pytest.raises(LmprobeError, match=r"`devices=16`: only 8 CPU devices could be made"):
        P.plan_devices(16)
    with pytest.raises(LmprobeError, match=r"`devices=0`: give a positive number"):
        P.plan_devices(0)
    assert P.plan_dtype("auto", "cpu", False) == jnp.float32
    assert P.plan_dtype("auto", "cpu", True) == P.plan_dtype("auto", "tpu", False) == jnp.bfloat16
    assert P.plan_dtype("float32", "cpu", True) == jnp.float32


def test_check_fits_without_a_limit_on_cpu_compiles_nothing():
    assert memory.device_hbm(MESH.devices.flat) is None
    assert memory.check_fits(TINY, mesh=MESH) is None


def test_planning_opens_no_tensor_file(monkeypatch, tmp_path):
    """A shipped config with no weights anywhere, and a directory whose weights are garbage."""
    from lmprobe.checkpoints import pickle_io, safetensors_io

    def refuse(*args, **kwargs):
        raise AssertionError("the plan opened a tensor file")

    for module, fn in [(safetensors_io, "open_file"), (safetensors_io, "open_index"), (pickle_io, "open_pickle")]:
        monkeypatch.setattr(module, fn, refuse)
    monkeypatch.setattr(np, "memmap", refuse)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty-cache"))
    p = P.plan("opt-125m", mesh=make_mesh(8), strategy="tp", offline=True, hbm_bytes=2**40, search=False,
               dtype=jnp.bfloat16, batch_size=1, max_length=16)
    assert p.source == path_of("opt-125m") and p.params_fit
    assert p.num_params == pytest.approx(125.2e6, rel=0.01)

    directory = tmp_path / "tiny"
    directory.mkdir()
    (directory / "config.json").write_text(json.dumps(TINY))
    (directory / "model.safetensors").write_bytes(b"not a safetensors file")
    config, source = hf_config(str(directory))
    assert config == TINY and source == str(directory / "config.json")


@pytest.mark.parametrize("length", [256, 0, -1])
def test_max_length_outside_the_context_is_refused(length):
    with pytest.raises(LmprobeError, match=rf"`max_length={length}`: .*'s context is 128 tokens: pass 1 to 128"):
        P.plan(TINY, mesh=MESH, max_length=length)


def test_cli_simulates_devices_and_reports(tmp_path):
    """`python -m experiments.plan --devices=4` makes its own 4 CPU devices (no conftest there)."""
    directory = tmp_path / "tiny"
    directory.mkdir()
    (directory / "config.json").write_text(json.dumps(TINY))
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    env.update(JAX_PLATFORMS="cpu", PYTHONPATH=os.pathsep.join(sys.path))
    run = subprocess.run([sys.executable, "-m", "experiments.plan", f"--model={directory}", "--devices=4",
                          "--model_parallel=2", "--dtype=float32", "--batch_size=1", "--max_length=16"],
                         capture_output=True, text=True, env=env, timeout=120)
    assert run.returncode == 0, run.stderr
    assert "4 cpu device(s), mesh data=2 x model=2" in run.stdout and "peak" in run.stdout


def test_cli_exits_with_the_flag_that_fixes_it(tmp_path, capsys):
    from lmprobe.cli import plan as cli

    config = tmp_path / "config.json"
    config.write_text(json.dumps(TINY))
    with pytest.raises(SystemExit) as exit:  # parameters replicated by tp do not fit: no compile
        cli.main([f"--model={config}", "--devices=8", "--sharding=tp", "--dtype=float32", "--hbm=200KiB"])
    out = capsys.readouterr()
    assert exit.value.code == 2 and "DOES NOT FIT" in out.out
    assert out.err.startswith("error: ") and "--model_parallel=4 " in out.err


def test_fsdp_activations_stay_split_over_the_batch(tiny_planner):
    """Under FSDP the layer inputs stay batch-sharded (lmprobe.models.layers.constrain): a device
    holds about one device's worth of activations, not the gathered batch."""
    import jax

    one = make_mesh(1, devices=jax.devices()[:1])
    rows, length = 8, 128
    alone = tiny_planner.step(one, "fsdp", rows, length).temp_bytes
    split = tiny_planner.step(MESH, "fsdp", rows, length).temp_bytes
    assert split < 1.5 * alone, (split, alone)


def test_a_compile_that_runs_out_says_the_figure_only_when_the_compiler_gave_one():
    """XLA's TPU compiler names the temporaries it asked for; a CUDA compile that runs out (seen on an H200:
    autotuning at 16 rows x 32768 tokens) names none, and the plan then prints no made-up figure."""
    tpu = memory._exhausted_bytes("RESOURCE_EXHAUSTED: Ran out of memory in memory space hbm. ... temporaries (32.02G)")
    gpu = memory._exhausted_bytes("RESOURCE_EXHAUSTED: Failed to allocate request for 512.00GiB on device ordinal 0")
    step = lambda temp: memory.StepMemory(16, 16, 32768, 0, 0, temp, 0, 0, 1.0, exhausted=True)  # noqa: E731
    assert tpu == int(32.02 * 2**30) and gpu == memory.UNKNOWN_BYTES
    assert memory.ran_out(step(tpu)) == "the compiler ran out of memory (temporaries 32.02 GiB)"
    assert memory.ran_out(step(gpu)) == "the compiler ran out of memory"
