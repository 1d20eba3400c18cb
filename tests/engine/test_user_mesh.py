"""A model already sharded on a user's mesh (MaxText-style axes) is scored where it lies, with the
numbers of lmprobe's own mesh; ``Scorer.update`` swaps weights without recompiling."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from jax.sharding import AxisType, Mesh, NamedSharding, PartitionSpec

from lmprobe.checkpoints import load
from lmprobe.engine import Scorer, make_mesh, placement
from lmprobe.engine.mesh import spec_for
from lmprobe.errors import LmprobeError
from lmprobe.models.axes import EMBED, HEADS, KV_HEADS, MLP, VOCAB
from tests.engine.test_callable import A, B, close, logged, wrap

MAXTEXT = {EMBED: "fsdp", HEADS: "tensor", KV_HEADS: "tensor", MLP: "tensor", VOCAB: "tensor"}  # logical -> mesh


def user_mesh(axis_type=AxisType.Auto) -> Mesh:
    return Mesh(np.asarray(jax.devices()).reshape(2, 2, 2), ("data", "fsdp", "tensor"), axis_types=(axis_type,) * 3)


def placed(path, mesh):
    """The tiny Llama with each parameter sharded by MAXTEXT's rules on ``mesh``."""
    def place(array, axes):
        return jax.device_put(array, NamedSharding(mesh, spec_for(array.shape, axes, mesh, MAXTEXT)))
    return load(str(path), place=place, tokenizer=False).model


@pytest.fixture(scope="module")
def reference(tiny_llama_dir):
    return Scorer(load(str(tiny_llama_dir), place=placement(make_mesh()), tokenizer=False).model, batch_size=2)


def _leaves(scorer_or_model):
    state = scorer_or_model.runner.state if isinstance(scorer_or_model, Scorer) else nnx.state(scorer_or_model)
    return jax.tree.leaves(state)


def test_a_model_on_a_maxtext_mesh_is_scored_where_it_lies(tiny_llama_dir, reference):
    mesh = user_mesh()
    model = placed(tiny_llama_dir, mesh)
    before = _leaves(model)
    assert model.layers.mlp.up_proj.kernel[...].sharding.spec == PartitionSpec(None, "fsdp", "tensor")
    scorer = Scorer(model, mesh=mesh, batch_size=2, data_axes=("data", "fsdp"))
    assert scorer.runner.data_parallel == 4 and scorer.runner.rows(2) == 8
    assert [b.shape[0] for b in scorer.runner.batches(A + B)] == [8, 4]  # rows split over data x fsdp
    close(scorer.score(A).token_logprobs, reference.score(A).token_logprobs)
    for mine, theirs in zip(scorer.score_pairs(A, B), reference.score_pairs(A, B)):
        close(mine.token_logprobs, theirs.token_logprobs)
    close(scorer.embed(A, pooling="last"), reference.embed(A, pooling="last"))
    got = scorer.next_token_stats(A, [[-1]] * 6, B, [[-1]] * 6, top_k=2)
    want = reference.next_token_stats(A, [[-1]] * 6, B, [[-1]] * 6, top_k=2)
    for key in want:
        close(got[key], want[key])
    assert scorer.generate(A, max_new_tokens=3, decode=False) == reference.generate(A, max_new_tokens=3,
                                                                                    decode=False)
    after = _leaves(scorer)  # the very same arrays, on their own shardings: nothing copied or re-placed
    assert len(after) == len(before) and all(x is y for x, y in zip(before, after))


def test_a_mesh_of_explicit_axes_works_too(tiny_llama_dir, reference):
    mesh = user_mesh(AxisType.Explicit)  # jax.make_mesh's default
    scorer = Scorer(placed(tiny_llama_dir, mesh), mesh=mesh, batch_size=2, data_axes=("data", "fsdp"))
    close(scorer.score(A).token_logprobs, reference.score(A).token_logprobs)


def test_the_batch_axes_must_be_named_and_exist(tiny_llama_dir):
    model = load(str(tiny_llama_dir), tokenizer=False).model
    mesh = Mesh(np.asarray(jax.devices()).reshape(4, 2), ("fsdp", "tensor"))
    with pytest.raises(LmprobeError, match=r"axes \('fsdp', 'tensor'\) and none named 'data'.*data_axes="):
        Scorer(model, mesh=mesh)
    with pytest.raises(LmprobeError, match=r"data_axes=\('batch',\).*axes are \('fsdp', 'tensor'\)"):
        Scorer(model, mesh=mesh, data_axes=("batch",))
    assert Scorer(model, mesh=mesh, data_axes="fsdp").runner.data_parallel == 4


def test_parameters_on_other_devices_are_moved_once_and_said(tiny_llama_dir, reference):
    elsewhere = make_mesh(devices=jax.devices()[6:])
    model = load(str(tiny_llama_dir), place=placement(elsewhere), tokenizer=False).model
    with logged() as messages:
        scorer = Scorer(model, mesh=make_mesh(devices=jax.devices()[:2]), batch_size=2)
        scorer.update(model)  # the same arrays, moved again: said once
    said = [m for m in messages if "onto the mesh" in m]
    assert len(said) == 1 and said[0].startswith("moved 12 parameter arrays")
    close(scorer.score(A[:2]).token_logprobs, reference.score(A[:2]).token_logprobs)


def _nudged(state, seed=0):
    keys = iter(jax.random.split(jax.random.key(seed), len(jax.tree.leaves(state))))
    return jax.tree.map(lambda x: x + 0.05 * jax.random.normal(next(keys), x.shape, x.dtype), state)


def test_update_swaps_weights_without_recompiling(tiny_llama_dir):
    mesh = make_mesh(devices=jax.devices()[:2])
    model = load(str(tiny_llama_dir), place=placement(mesh), tokenizer=False).model
    scorer = Scorer(model, mesh=mesh, batch_size=2)
    callable_scorer = Scorer(wrap(model), mesh=mesh, batch_size=2)
    first = scorer.score(A).nll
    callable_scorer.score(A)
    traced = dict(scorer.compilations), dict(callable_scorer.compilations)
    graphdef, state = nnx.split(model)
    trained = nnx.merge(graphdef, _nudged(state))  # a trainer's model a few steps on
    scorer.update(trained, step=100)
    callable_scorer.update(nnx.state(trained))  # a CallableLM's params pytree: the wrapped model's state
    second = scorer.score(A).nll
    assert not np.allclose(first, second)
    np.testing.assert_allclose(callable_scorer.score(A).nll, second, rtol=1e-5)
    assert (dict(scorer.compilations), dict(callable_scorer.compilations)) == traced
    expected = Scorer(trained, mesh=mesh, batch_size=2).score(A).nll
    np.testing.assert_allclose(second, expected, rtol=1e-6)
    assert scorer.identity["step"] == 100 and callable_scorer.identity["update"] == 1
    scorer.update(nnx.state(model))  # an nnx.State works too: back to the first weights
    np.testing.assert_allclose(scorer.score(A).nll, first, rtol=1e-6)
    assert scorer.identity["step"] is None and scorer.identity["update"] == 2


def test_update_replaces_leaves_whose_sharding_drifted_without_recompiling(tiny_llama_dir):
    """A train step jitted without out_shardings re-shards leaves: update puts them back on the Scorer's
    layout (said once, naming them), and nothing compiles again."""
    mesh = make_mesh(devices=jax.devices()[:2])
    model = load(str(tiny_llama_dir), place=placement(mesh), tokenizer=False).model
    scorer = Scorer(model, mesh=mesh, batch_size=2)
    scorer.score(A)
    traced = dict(scorer.compilations)
    graphdef, state = nnx.split(model)
    nudged = _nudged(state)
    whole = NamedSharding(mesh, PartitionSpec())  # the trainer's step gave the final norm's scale back replicated
    drifted = jax.tree.map(lambda x: jax.device_put(x, whole) if x.ndim == 1 else x, nudged)
    assert drifted["norm"]["weight"][...].sharding != state["norm"]["weight"][...].sharding
    with logged() as messages:
        scorer.update(drifted, step=1)
        scorer.update(drifted, step=2)
    said = [m for m in messages if "another sharding" in m]
    count = sum(x.ndim == 1 for x in jax.tree.leaves(state))
    assert len(said) == 1 and said[0].startswith(f"update: {count} parameter arrays (") and "norm.weight" in said[0]
    np.testing.assert_allclose(scorer.score(A).nll, Scorer(nnx.merge(graphdef, nudged), mesh=mesh,
                                                           batch_size=2).score(A).nll, rtol=1e-6)
    assert dict(scorer.compilations) == traced
    assert scorer.runner.state["norm"]["weight"][...].sharding == state["norm"]["weight"][...].sharding


def test_update_names_the_first_leaf_that_differs(tiny_llama_dir):
    mesh = make_mesh(devices=jax.devices()[:2])
    model = load(str(tiny_llama_dir), place=placement(mesh), tokenizer=False).model
    scorer = Scorer(model, mesh=mesh, batch_size=2)
    state = nnx.state(model)
    halves = jax.tree.map(lambda x: x.astype("bfloat16"), state)
    with pytest.raises(LmprobeError, match=r"leaf embed_tokens.embedding is bfloat16\[256, 64\], expected float32"):
        scorer.update(halves)
    other = load(str(tiny_llama_dir), tokenizer=False, dtype=jnp.bfloat16).model
    with pytest.raises(LmprobeError, match="graph differs"):
        scorer.update(other)
    with pytest.raises(LmprobeError, match="update takes an nnx.Module .* got dict"):
        scorer.update({"embed_tokens": 1})
    callable_scorer = Scorer(wrap(model), mesh=mesh, batch_size=2)
    pure = nnx.to_pure_dict(state)
    with pytest.raises(LmprobeError, match="lack the leaf params.lm_head.kernel"):
        callable_scorer.update({k: v for k, v in pure.items() if k != "lm_head"})
    with pytest.raises(LmprobeError, match="same leaves in other containers"):
        callable_scorer.update(pure)  # a dict where the callable was given an nnx.State
