"""The front ends' flags come from their dataclasses, mean the same everywhere, and every
results.json gets run_info; logs go to stderr, the summary to stdout."""

from __future__ import annotations

import dataclasses
import json

import pytest

from lmprobe.cli import (
    byod,
    common,
    flags,
    mstemp,
    plan,
    scope,
    smoke,
    sweep,
    synbench,
    syntextbench,
    throughput,
    train,
    validate,
)
from lmprobe.data import gaussian
from lmprobe.methods import byod as byod_method
from lmprobe.methods import mstemp as mstemp_method
from lmprobe.methods import scope as scope_method
from lmprobe.methods import synbench as synbench_method
from lmprobe.methods import syntextbench as syntextbench_method
from lmprobe.methods.scope import training
from lmprobe.training import config as train_config

FRONT_ENDS = {"syntextbench": syntextbench, "byod": byod, "scope": scope, "synbench": synbench, "mstemp": mstemp,
              "throughput": throughput, "plan": plan, "smoke": smoke, "validate": validate,
              "sweep": sweep, "train": train}
METHODS = {"syntextbench": [syntextbench_method.Config], "byod": [byod_method.Config],
           "scope": [scope_method.Config, training.TrainConfig], "synbench": [synbench_method.Config],
           "mstemp": [mstemp_method.Config], "train": [train_config.Config]}
SHARED = ("model_parallel", "sharding", "dtype", "offline", "revision", "allow_pickle", "batch_size", "seed",
          "verbosity")


def _parsers(name):
    built = FRONT_ENDS[name].build_parser()
    return (built, ()) if isinstance(built, flags.Parser) else (built[0], built[1:])


@pytest.mark.parametrize("name", sorted(FRONT_ENDS))
def test_every_field_has_a_flag_with_help_and_the_shared_flags_are_there(name):
    p, bindings = _parsers(name)
    options = p._option_string_actions
    assert [b.cls for b in bindings] == METHODS.get(name, [])
    for binding in bindings:
        for field in dataclasses.fields(binding.cls):
            assert f"--{binding.dests[field.name]}" in options, (name, field.name)
    front = getattr(FRONT_ENDS[name], "FrontEnd", None)
    for field in dataclasses.fields(front) if front else ():
        assert f"--{field.name}" in options, (name, field.name)
    for shared in SHARED:
        assert f"--{shared}" in options, (name, shared)
    for action in p._actions:
        assert action.help, (name, action.dest)


@pytest.mark.parametrize("name", sorted(METHODS))
def test_no_flag_gives_the_method_defaults(name):
    p, bindings = _parsers(name)
    args = p.parse_args([])
    for binding in bindings:
        expected = binding.cls()
        if binding.cls is training.TrainConfig:  # picked per head when not given
            assert args.learning_rate is None
            expected = dataclasses.replace(expected, learning_rate=1.0)
        assert binding.make(args, **({"learning_rate": 1.0} if binding.cls is training.TrainConfig else {})) == expected


def test_help_shows_groups_defaults_and_the_usage_text_unreflowed():
    text = syntextbench.build_parser()[0].format_help()
    for title in ("front end:", "method (lmprobe.methods.syntextbench.Config):",
                  "shared (the same in every front end):"):
        assert title in text
    assert text.index("front end:") < text.index("method (") < text.index("shared (")
    assert "(default: 8192)" in text and "(default: minilm-l6)" in text and "(default: auto)" in text
    assert "    python -m experiments.syntextbench [--model=NAME[,NAME...]] [--n=8192" in text
    assert "--baselines, --no_baselines" in text and "--energy NUM" in text and "--baseline_level NUM" in text


@pytest.mark.parametrize("name, argv, expected", [
    ("syntextbench", ["--no_baselines", "--levels=0,0.2", "--levels=0.4"], {"baselines": False, "levels": (0, .2, .4)}),
    ("syntextbench", ["--model=a,b", "--model=c"], {"model": ("a", "b", "c")}),
    ("byod", ["--model=a", "--model=b,c", "--k_long_range=2,1", "--no_generate", "--top_p=0.9"],
     {"model": ("a", "b", "c"), "k_long_range": (2, 1), "generate": False, "top_p": 0.9}),
    ("byod", ["--max_examples=none", "--metrics=negation"], {"max_examples": None, "metrics": ("negation",)}),
    ("scope", ["--model=a", "--model=b,c", "--bootstrap=7", "--learning_rate=0.1", "--train_batch_size=8"],
     {"model": ("a", "b", "c"), "n_bootstrap": 7, "learning_rate": 0.1, "train_batch_size": 8}),
    ("scope", ["--reference=m", "--target=v5e-8"], {"reference": "m", "target": "v5e-8"}),
    ("synbench", ["--eps=0,0.4", "--absolute_eps", "--scales=reference", "--norm=inf", "--input_shape=3x8x8"],
     {"epsilons": (0, .4), "relative_epsilon": False, "scales": gaussian.REFERENCE_SCALES,
      "norm": float("inf"), "input_shape": (3, 8, 8)}),
    ("synbench", [], {"batch_size": 64, "sample_batch_size": 64}),
    ("synbench", ["--sample_batch_size=8"], {"batch_size": 64, "sample_batch_size": 8}),
    ("mstemp", ["--evaluator=a,b", "--evaluator=c", "--label_names=neg,pos"],
     {"evaluator": ("a", "b", "c"), "label_names": ("neg", "pos")}),
    ("throughput", ["--forward=2x16", "--forward=4x8"], {"forward": ("2x16", "4x8")}),
    ("plan", ["--buckets=128", "--buckets=256", "--devices=none"], {"buckets": (128, 256), "devices": None}),
])
def test_flags_keep_their_names_and_take_lists_both_ways(name, argv, expected):
    args = _parsers(name)[0].parse_args(argv)
    assert {k: getattr(args, k) for k in expected} == expected


def test_a_method_field_named_as_a_shared_flag_fails_when_the_parser_is_built():
    @dataclasses.dataclass(frozen=True)
    class Config:
        seed: int = 0  # reads the shared --seed (common.METHOD_SHARED)
        batch_size: int = 64

    with pytest.raises(TypeError, match=r"test_front_ends\..*Config\.batch_size: the parser already has "
                                        r"--batch_size.*names="):
        common.method(common.parser("x"), Config)
    p = common.parser("x")
    binding = common.method(p, Config, names={"batch_size": "config_batch_size"})
    assert binding.make(p.parse_args(["--seed=2"])) == Config(seed=2, batch_size=64)


def test_synbench_sample_batch_size_sets_its_config_and_batch_size_its_models():
    p, method = synbench.build_parser()
    args = p.parse_args(["--sample_batch_size=8", "--batch_size=4"])
    assert method.make(args).batch_size == 8 and args.batch_size == 4
    assert method.make(p.parse_args([])).batch_size == synbench_method.Config.batch_size == 64


def test_a_yaml_config_runs_a_front_end_and_flags_override_it(tmp_path, capsys):
    config = tmp_path / "synbench.yaml"
    config.write_text("n: 16\nscales: [1, 5]\neps: [0]\na_t: [0.7]\nseed: 3\noutput_dir: %s\n" % (tmp_path / "run"))
    synbench.main([f"--config={config}", "--eps=0,0.2", "--verbosity=warning"])
    result = json.loads((tmp_path / "run" / "results.json").read_text())
    assert result["config"]["n"] == 16 and result["config"]["epsilons"] == [0, 0.2] and result["config"]["seed"] == 3
    flags_used = result["run_info"]["flags"]
    assert flags_used["config"] == str(config) and flags_used["scales"] == [1.0, 5.0]
    out, err = capsys.readouterr()
    assert "SynBench-Score" in out and err == ""  # --verbosity=warning: no info lines


def test_results_get_run_info_and_a_rerun_keeps_the_earlier_file(tmp_path, capsys):
    argv = ["--n=16", "--scales=1,5", "--eps=0", "--a_t=0.7", "--seed=2", f"--output_dir={tmp_path}"]
    synbench.main(argv)
    first = json.loads((tmp_path / "results.json").read_text())
    info = first["run_info"]
    assert info["seed"] == 2 and info["command"]["argv"][-len(argv):] == argv
    assert info["flags"]["model"] == "identity" and info["devices"]["count"] >= 1 and "started" in info
    synbench.main(argv)
    kept = [p.name for p in tmp_path.glob("results-*.json")]
    assert len(kept) == 1 and json.loads((tmp_path / kept[0]).read_text())["run_info"] == info
    out, err = capsys.readouterr()
    assert "SynBench-Score" in out and "results in" in out


def test_scope_passes_the_shared_flags_to_every_model(tmp_path, monkeypatch):
    data = tmp_path / "data.csv"
    data.write_text("text,label\n" + "\n".join(f"sentence number {i},{i % 2}" for i in range(20)) + "\n")
    calls = []

    class Loaded(Exception):
        pass

    def load_scorer(name, **kwargs):
        calls.append((name, kwargs))
        raise Loaded

    monkeypatch.setattr("lmprobe.engine.Scorer.load", load_scorer)
    with pytest.raises(Loaded):
        scope.main(["--reference=ref@bf16", "--model=t", f"--dataset={data}", "--model_parallel=2", "--sharding=tp",
                    "--revision=abc", "--offline", "--dtype=bfloat16", "--batch_size=3", f"--output_dir={tmp_path}"])
    (name, kwargs), = calls
    assert name == "ref@bf16" and str(kwargs.pop("dtype")) == "bfloat16" and kwargs.pop("progress") is common.progress
    assert kwargs == {"model_parallel": 2, "strategy": "tp", "offline": True, "allow_pickle": False,
                      "batch_size": 3, "revision": "abc"}


@pytest.mark.parametrize("front_end", [syntextbench, byod, synbench, throughput])
def test_every_front_end_loads_variants(front_end, tmp_path, monkeypatch):
    # NAME@noise=SIGMA etc. reach the variant loader from every front end, not only scope and validate
    calls = []

    class Loaded(Exception):
        pass

    def load_scorer(name, **kwargs):
        calls.append(name)
        raise Loaded

    monkeypatch.setattr("lmprobe.engine.Scorer.load", load_scorer)
    with pytest.raises(Loaded):
        front_end.main(["--model=smollm2-135m@noise=0.1", f"--output_dir={tmp_path}"])
    assert calls == ["smollm2-135m@noise=0.1"]


def test_scope_head_auto_is_zero_shot_for_decoders_and_fine_tuned_for_encoders():
    from types import SimpleNamespace

    from lmprobe.methods.scope import build

    decoder, encoder = SimpleNamespace(is_decoder=True), SimpleNamespace(is_decoder=False)
    assert [build.head_for("auto", m) for m in (decoder, encoder)] == ["zero-shot", "finetune"]
    assert build.head_for("probe", decoder) == "probe"
    assert scope.build_parser()[0].parse_args(["--head=checkpoint"]).head == "checkpoint"


@pytest.mark.multi_device  # --model_parallel=2: a mesh over several devices
def test_synbench_loads_a_vit_with_the_shared_flags(tmp_path, monkeypatch):
    from transformers import ViTConfig, ViTModel

    from tests.models.parity import save_random

    path = tmp_path / "vit"
    save_random(ViTModel, ViTConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=4, intermediate_size=64,
                                    image_size=16, patch_size=8, num_channels=3), path)
    seen = {}
    real = common.load_checkpoint

    def spy(args, name, **kwargs):
        seen.update(model_parallel=args.model_parallel, sharding=args.sharding, revision=args.revision)
        return real(args, name, **kwargs)

    monkeypatch.setattr(common, "load_checkpoint", spy)
    out = tmp_path / "run"
    synbench.main([f"--model={path}", "--n=16", "--scales=1,5", "--a_t=0.7", "--eps=0", "--batch_size=8",
                   "--dtype=bfloat16", "--model_parallel=2", "--sharding=tp", f"--output_dir={out}"])
    assert seen == {"model_parallel": 2, "sharding": "tp", "revision": None}
    info = json.loads((out / "results.json").read_text())["run_info"]
    (model,) = info["models"]
    assert model["dtype"] == "bfloat16" and model["checkpoint"]["location"] == str(path)


def test_warnings_go_to_stderr_and_info_follows_verbosity(capsys):
    from lmprobe import log

    common.parse(common.parser("x"), ["--verbosity=info"])
    common.log.info("an info line")
    common.log.warning("a warning")
    common.say("the summary")
    out, err = capsys.readouterr()
    assert out == "the summary\n" and err == "an info line\nwarning: a warning\n"
    common.parse(common.parser("x"), ["--verbosity=error"])
    common.log.warning("hidden")
    assert capsys.readouterr().err == "" and not log.enabled()
    numbers = range(2)
    assert common.progress(numbers) is numbers  # no bar, no progress lines
    common.parse(common.parser("x"), [])  # back to info for the other tests


def test_plan_reads_the_config_of_the_revision_asked_for(tmp_path, monkeypatch, capsys):
    from lmprobe.checkpoints.configs import shipped_config

    repo = tmp_path / "hub" / "models--facebook--opt-125m"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "v1").write_text("a" * 40)
    (repo / "snapshots" / ("a" * 40)).mkdir(parents=True)
    (repo / "snapshots" / ("a" * 40) / "config.json").write_text(
        json.dumps({**shipped_config("opt-125m"), "num_hidden_layers": 2}))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    from lmprobe.checkpoints.model_config import hf_config

    assert hf_config("opt-125m", revision="v1", offline=True)[0]["num_hidden_layers"] == 2
    assert hf_config("opt-125m", offline=True)[0]["num_hidden_layers"] == 12  # the default revision: shipped
    with pytest.raises(SystemExit) as stop:
        plan.main(["--model=opt-125m", "--revision=v2", "--offline"])
    assert stop.value.code == 2 and "revision 'v2' is not cached" in capsys.readouterr().err


ENCODER = "'minilm-l6' is an encoder: give a causal LM such as smollm2-135m"


@pytest.mark.parametrize("name, argv, message", [
    ("syntextbench", ["--batch_size=0"], "argument --batch_size: give an integer in [1, 65536], not 0"),
    ("syntextbench", ["--batch_size=-4"], "argument --batch_size: give an integer in [1, 65536], not -4"),
    ("byod", ["--model_parallel=0"], "argument --model_parallel: give an integer >= 1, not 0"),
    ("byod", ["--seed=-1"], "argument --seed: give an integer >= 0, not -1"),
    ("syntextbench", ["--energy=2"], "energy=2.0 is the share of singular-value energy"),
    ("syntextbench", ["--energy=0"], "give a number in (0, 1], e.g. 0.99"),
    ("syntextbench", ["--n=16"], "n=16 sentences per level leaves 2 to test on (10% of n): accuracy needs at least "
                                 "20 (steps of 0.05, the a_t sweep's); use n >= 195"),
    ("syntextbench", ["--icl_examples=-1"], "icl_examples=-1 must be >= 0"),
    ("syntextbench", ["--generator=minilm-l6", "--n=200"], "syntextbench --generator (A.2) needs a causal LM; "
                                                           + ENCODER),
    ("plan", ["--max_length=-1"], "--max_length=-1: opt-13b's context is 2048 tokens: pass 1 to 2048"),
    ("plan", ["--max_length=0"], "--max_length=0: opt-13b's context is 2048 tokens"),
    ("plan", ["--max_length=4096"], "--max_length=4096: opt-13b's context is 2048 tokens"),
    ("plan", ["--max_tokens=0"], "argument --max_tokens: give an integer >= 1, not 0"),
    ("byod", ["--model=minilm-l6"], "byod needs a causal LM or an encoder-decoder; " + ENCODER),
    ("byod", ["--model=smollm2-135m@noise=abc"], "'@noise=abc' in 'smollm2-135m@noise=abc': SIGMA is not a number "
                                                 ">= 0; write NAME@noise=SIGMA"),
    ("byod", ["--model=smollm2-135m@drop-layer=x"], "K is not an integer; write NAME@drop-layer=K"),
    ("byod", ["--top_p=0"], "top_p=0.0 in (0, 1]"),
    ("byod", ["--top_k=-1"], "top_k=-1 >= 0"),
    ("byod", ["--max_documents=0"], "argument --max_documents: give an integer >= 1, not 0"),
    ("mstemp", ["--evaluator=minilm-l6"], "mstemp's evaluators (--evaluator) needs a causal LM or an encoder-decoder"),
    ("mstemp", ["--top_p=1.5"], "top_p=1.5 in (0, 1]"),
    ("mstemp", ["--max_examples=0"], "argument --max_examples: give an integer >= 1, not 0"),
    ("mstemp", ["--label_names=a,b,c", "--max_examples=8"], "--label_names gives 3 names for 2 classes"),
    ("scope", ["--task=lm", "--reference=minilm-l6", "--model=smollm2-135m"], "scope --task=lm needs a causal LM; "
                                                                              + ENCODER),
    ("scope", ["--head=zero-shot", "--model=minilm-l6"], "scope --head=zero-shot needs a causal LM; " + ENCODER),
    ("scope", ["--max_examples=0"], "argument --max_examples: give an integer >= 1, not 0"),
    ("scope", ["--bootstrap=-1"], "n_bootstrap=-1 must be >= 0"),
    ("synbench", ["--input_scale=0"], "argument --input_scale: give a number > 0, not 0"),
    ("synbench", ["--seq_len=0"], "argument --seq_len: give an integer >= 1, not 0"),
    ("synbench", ["--sample_batch_size=0"], "argument --sample_batch_size: give an integer in [1, 1048576], not 0"),
    ("validate", ["--tweets_min_confidence=2"], "and --tweets_min_confidence in [0, 1]"),
    ("validate", ["--synbench_n=4"], "--synbench_n=4 must be >= 8"),
    ("validate", ["--synbench_scales=1,0"], "(`synbench_*`): scales [1.0, 0.0] must be non-empty and > 0"),
    ("throughput", ["--repeats=0"], "argument --repeats: give an integer >= 1, not 0"),
    ("throughput", ["--forward=0x128"], "shape '0x128': write it as positive integers joined by x"),
    ("throughput", ["--model=minilm-l6"], "throughput needs a causal LM; " + ENCODER),
    ("smoke", ["--model=minilm-l6"], "smoke --model needs a causal LM; " + ENCODER),
])
def test_a_bad_value_is_one_line_and_status_2_before_any_model_work(name, argv, message, tmp_path, monkeypatch,
                                                                     capsys):
    monkeypatch.chdir(tmp_path)  # default output directories (runs/...) land here
    monkeypatch.setattr("lmprobe.engine.Scorer.load", lambda *a, **k: pytest.fail("a model was loaded"))
    monkeypatch.setattr(common, "load_checkpoint", lambda *a, **k: pytest.fail("a model was loaded"))
    with pytest.raises(SystemExit) as stop:
        FRONT_ENDS[name].main(argv)
    err = capsys.readouterr().err
    assert stop.value.code == 2 and len(err.strip().splitlines()) == 1 and err.startswith("error: "), err
    assert message in err and "Traceback" not in err
    assert not list(tmp_path.rglob("results.json"))
