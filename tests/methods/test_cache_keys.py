"""Cache keys hold what changes the cached value: the same model name with another dtype or other
weights recomputes; an unchanged model resumes without calling the model. Long stages move bars."""

from __future__ import annotations

import collections
import dataclasses
import os
import shutil
import zlib

import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

from lmprobe.data.corpus import Corpus
from lmprobe.engine import Scorer
from lmprobe.methods import Ticker, byod, icl, loss_data, model_key, synbench, syntextbench
from lmprobe.methods import scope as scope_method
from lmprobe.methods.scope import models as scope_models
from lmprobe.store import cache_key
from tests.engine.conftest import VOCAB, tiny_llama_dir  # noqa: F401 - the fixture

TINY = syntextbench.Config(n=200, levels=(0.0, 0.5), baseline_level=0.5, baseline_steps=10, icl_examples=3)
EMBEDDINGS_ONLY = dataclasses.replace(TINY, baselines=False, icl_examples=0)


class Spy:
    """A Scorer that counts its model calls; words become ids by hashing (the tiny vocabulary has no English)."""

    def __init__(self, scorer):
        self.scorer, self.calls = scorer, collections.Counter()

    def __getattr__(self, name):
        return getattr(self.scorer, name)

    def embed(self, texts, **kwargs):
        self.calls["embed"] += 1
        ids = [[3 + zlib.crc32(w.encode()) % (VOCAB - 3) for w in t.split()] or [3] for t in texts]
        return self.scorer.embed(ids, **kwargs)

    def score(self, inputs):
        self.calls["score"] += 1
        return self.scorer.score(inputs)


@pytest.fixture
def model_dir(tiny_llama_dir, tmp_path):  # noqa: F811
    """A private copy of the tiny Llama, whose weights a test may replace under the same name."""
    return shutil.copytree(tiny_llama_dir, tmp_path / "model")


def _replace_weights(model_dir) -> None:
    path = os.path.join(model_dir, "model.safetensors")
    save_file({k: v * 1.5 for k, v in load_file(path).items()}, path)


def _load(model_dir, dtype="float32"):
    return Spy(Scorer.load(str(model_dir), dtype=dtype, batch_size=8))


def _syntextbench(scorer, cache, tasks, config=TINY):
    return syntextbench.run(scorer, config, model_name="tiny", cache_dir=str(cache), tasks=[tasks])


def test_syntextbench_recomputes_for_another_dtype_or_weights_and_resumes_otherwise(model_dir, tmp_path,
                                                                                    monkeypatch):
    tasks, cache = syntextbench.build_tasks(TINY), tmp_path / "cache"
    first = _load(model_dir)
    result = _syntextbench(first, cache, tasks)
    assert first.calls["embed"] == 4 and first.calls["score"] == 1  # 2 levels x 2 splits; one ICL pass
    files = set(os.listdir(cache))
    assert len(files) == 6 and {f.split("-")[0] for f in files} >= {"baselines", "icl"}

    def untrained(*args, **kwargs):
        raise AssertionError("cached baselines must not train again")

    monkeypatch.setattr(loss_data, "loss_data_curves", untrained)
    again = _load(model_dir)  # the same checkpoint, loaded afresh: everything resumes
    assert _syntextbench(again, cache, tasks).to_dict()["levels"] == result.to_dict()["levels"]
    assert again.calls == {}
    monkeypatch.undo()

    bf16 = _load(model_dir, "bfloat16")  # the same name, another dtype
    _syntextbench(bf16, cache, tasks, EMBEDDINGS_ONLY)
    assert bf16.calls["embed"] == 4 and len(os.listdir(cache)) == 10

    _replace_weights(model_dir)  # other weights under the same path
    changed = _load(model_dir)
    assert changed.identity["checkpoint"]["weights_sha256"] != first.identity["checkpoint"]["weights_sha256"]
    _syntextbench(changed, cache, tasks, EMBEDDINGS_ONLY)
    assert changed.calls["embed"] == 4 and len(os.listdir(cache)) == 14


def test_byod_recomputes_for_another_dtype(model_dir, tmp_path):
    corpus = Corpus("tiny", [["w3 w4 w5 w6 w7.", "w8 w9 w10 w11."]])
    config = byod.Config(metrics=("entropy",), max_examples=2)
    runs = [Scorer.load(str(model_dir), dtype=d, batch_size=8) for d in ("float32", "float32", "bfloat16")]
    for scorer in runs:
        byod.run(scorer, corpus, config, model_name="tiny", cache_dir=str(tmp_path / "cache"))
    assert len(os.listdir(tmp_path / "cache")) == 2  # float32 once (resumed the second time), bfloat16 once


def test_synbench_keys_hold_the_model_identity(model_dir, tmp_path):
    config = synbench.Config(n=16, scales=(1.0, 3.0), batch_size=16, a_t=(0.6,), epsilons=(0.0,))
    f32, bf16 = (Scorer.load(str(model_dir), dtype=d, batch_size=8) for d in ("float32", "bfloat16"))
    for scorer in (f32, f32, bf16):
        synbench.run(synbench.scorer_representation(scorer, "tiny", seq_len=4), config,
                     cache_dir=str(tmp_path / "cache"))
    assert len(os.listdir(tmp_path / "cache")) == 2 * 2 * 2 * 2  # (f32, bf16) x 2 scales x 2 splits x (reps, labels)
    for about in ({"weights_sha256": "a"}, {"weights_sha256": "a"}, {"weights_sha256": "b"}):  # e.g. a ViT's
        rep = synbench.function_representation("vit", lambda x: 2 * x, (4,), batch_size=16, identity=about)
        synbench.run(rep, config, cache_dir=str(tmp_path / "functions"))
    assert len(os.listdir(tmp_path / "functions")) == 2 * 2 * 2 * 2


def test_scope_search_keys_hold_variants_and_heads(model_dir):
    base = Scorer.load(str(model_dir), batch_size=8)
    int8 = Scorer.load(f"{model_dir}@int8", batch_size=4, strategy="tp")
    assert int8.identity["variants"] == ["@int8"] and int8.identity["name"].endswith("@int8")
    assert (int8.strategy, int8.batch_size, int8.mesh) == ("tp", 4, int8.mesh)
    a, b = scope_models.NextToken("m", base), scope_models.NextToken("m", int8)
    zero_shot = scope_models.ZeroShotClassifier("m", base, ("negative", "positive"))
    keys = {str(model_key(m)) for m in (a, b, zero_shot)}
    assert len(keys) == 3
    black_box = scope_models.SampledModel("bb", scope_models.sampler_from(zero_shot), zero_shot.label_names)
    assert black_box.identity["black_box"]["sampled_from"] == zero_shot.identity
    assert "location" not in str(model_key(a))  # a moved checkpoint keeps its caches
    config = scope_method.Config(task="lm")
    saved = cache_key(model="m", reference=model_key(a), texts=["x"], **vars(config), version=2)
    assert saved != cache_key(model="m", reference=model_key(b), texts=["x"], **vars(config), version=2)


def test_progress_moves_with_the_work():
    seen = collections.Counter()

    def progress(iterable, desc="", total=None):
        for item in iterable:
            seen[desc] += 1
            yield item

    x = np.random.default_rng(0).normal(size=(40, 4)).astype(np.float32)
    loss_data.loss_data_curves(x, np.arange(40) % 2, steps=250, seeds=1, n_points=2, hidden=(4,),
                               progress=progress, desc="b")
    assert seen["b (250 steps)"] == 3  # 100 + 100 + 50 steps
    ticker = Ticker(progress, 5, "t")
    ticker.advance(2)
    ticker.advance_to(5)
    assert seen["t"] == 5


def test_icl_prompts_go_through_progress_in_chunks(tiny_llama_dir, monkeypatch):  # noqa: F811
    scorer = Scorer.load(str(tiny_llama_dir), batch_size=8)
    monkeypatch.setattr(icl, "CHUNK", 2)
    steps = []
    progress = lambda it, desc="", total=None: (steps.append(total), it)[1]  # noqa: E731
    tasks = [(["w3 w4", "w5 w6", "w7"], [1, -1, 1], [("w8", 1), ("w9", -1)]), (["w10"], [-1], [("w8", 1)])]
    both = icl.icl_accuracies(scorer, tasks, progress=progress)
    assert steps == [2] and both == [icl.icl_accuracy(scorer, *tasks[0]), icl.icl_accuracy(scorer, *tasks[1])]


def test_vit_representation_keys_on_the_identity_it_is_given(tmp_path):
    from transformers import ViTConfig, ViTModel

    from lmprobe.checkpoints import identity, load
    from tests.models.parity import save_random

    save_random(ViTModel, ViTConfig(hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32,
                                    image_size=8, patch_size=4, num_channels=3), tmp_path / "vit")
    loaded = load(str(tmp_path / "vit"), tokenizer=False)
    about = {**identity(loaded.checkpoint), "dtype": "float32"}  # what the front end passes
    rep = lambda about: synbench.vit_representation(loaded.model, "vit", mean=[0.5] * 3, std=[0.2] * 3,  # noqa: E731
                                                    image_size=(8, 8), identity=about)
    assert rep(about).identity["weights_sha256"] == about["weights_sha256"] and "location" not in rep(about).identity
    assert rep(None).identity["family"] == type(loaded.model).__name__  # no checkpoint given: family and dtype


def test_a_truncated_cache_entry_is_recomputed_and_results_say_which_stages_came_from_the_cache(model_dir, tmp_path):
    config = dataclasses.replace(TINY, n=200)
    tasks, cache = syntextbench.build_tasks(config), tmp_path / "cache"
    first = _syntextbench(_load(model_dir), cache, tasks, config)
    assert first.to_dict()["cached_stages"] == {}
    again = _syntextbench(_load(model_dir), cache, tasks, config)
    assert again.cached_stages == {"embedding": {"hits": 4, "entries": 4}, "icl": {"hits": 1, "entries": 1},
                                   "baselines": {"hits": 1, "entries": 1}}

    npy = sorted(f for f in os.listdir(cache) if f.endswith("-train.npy"))[0]
    shape = np.load(cache / npy).shape
    (cache / npy).write_bytes((cache / npy).read_bytes()[:100])  # an interrupted copy, a full disk
    icl_file = next(f for f in os.listdir(cache) if f.startswith("icl-"))
    (cache / icl_file).write_text("")
    spy = _load(model_dir)
    resumed = _syntextbench(spy, cache, tasks, config)
    assert spy.calls == {"embed": 1, "score": 1}  # just the two unreadable entries, computed anew
    assert resumed.to_dict()["levels"] == first.to_dict()["levels"]
    assert resumed.cached_stages == {"embedding": {"hits": 3, "entries": 4}, "baselines": {"hits": 1, "entries": 1}}
    assert np.load(cache / npy).shape == shape and len(os.listdir(cache)) == 6  # rewritten whole
