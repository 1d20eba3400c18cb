"""BYOD metrics against direct full-vocabulary computations on a tiny random Llama, the front
end end to end, bad input, and (slow) sanity on SmolLM2-135M."""

import json
import math
import shutil

import jax
import numpy as np
import pytest
from flax import nnx
from scipy.spatial.distance import jensenshannon
from scipy.special import log_softmax, softmax
from scipy.stats import entropy as shannon
from tokenizers import Tokenizer, decoders, models, normalizers, processors, trainers
from transformers import PreTrainedTokenizerFast

from lmprobe.checkpoints import load
from lmprobe.cli import byod as front_end
from lmprobe.data.corpus import Corpus
from lmprobe.data.profanity import Profanity
from lmprobe.engine import HiddenMemo, Scorer, make_mesh
from lmprobe.errors import LmprobeError
from lmprobe.methods import byod
from lmprobe.methods.byod import common, knowledge, long_range, next_token, toxicity
from lmprobe.perturb.text import DEFAULT_TRIGGER
from lmprobe.perturb.tokenization import chopped_ids
from tests.engine.conftest import VOCAB, tiny_llama_dir  # noqa: F401 - the fixture

PARAGRAPHS = [
    ["The cat was on the mat.", "A dog is in the yard.", "Birds were singing at dawn.",
     "The sun is bright today.", "We walked to the old mill.", "Fuck, the river was cold."],
    ["Rain fell on the town.", "The bread is warm and fresh.", "Children were playing outside.",
     "The market was busy.", "An old man sold apples.", "The day is long."],
    ["My friend is a painter.", "Her house was near the sea.", "The boats were red and blue.",
     "The wind is strong in winter.", "She paints the waves.", "Damn, that storm was wild."],
    ["This one is short."],
]
PROFANITY = Profanity(frozenset({"fuck", "damn"}), "test list")
FEW = {"limit": 6}


def _tokenizer(bos: bool) -> PreTrainedTokenizerFast:
    """Llama-style BPE (prefix "▁", spaces as "▁") small enough for the model's 256 ids."""
    text = [s for p in PARAGRAPHS for s in p] + [DEFAULT_TRIGGER.strip()] * 20
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    tok.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.Fuse(), decoders.Strip(" ", 1, 0)])
    tok.train_from_iterator(text, trainers.BpeTrainer(
        vocab_size=VOCAB, special_tokens=["<pad>", "<s>", "</s>", "<unk>"],
        initial_alphabet=[chr(c) for c in range(32, 127)] + ["▁"]))
    if bos:
        tok.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 1)])
    return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", bos_token="<s>", eos_token="</s>",
                                   unk_token="<unk>")


def _scorer(model_dir, bos: bool) -> Scorer:
    model = load(str(model_dir), tokenizer=False).model
    tokenizer = _tokenizer(bos)
    assert len(tokenizer) <= VOCAB
    return Scorer(model, tokenizer, mesh=make_mesh(devices=jax.devices()[:1]), batch_size=4)


@pytest.fixture(scope="module")
def scorer(tiny_llama_dir):  # noqa: F811
    return _scorer(tiny_llama_dir, bos=False)


@pytest.fixture(scope="module")
def bos_scorer(tiny_llama_dir):  # noqa: F811
    return _scorer(tiny_llama_dir, bos=True)


def _logits(scorer, ids) -> np.ndarray:
    """Full-vocabulary logits of one sequence, by one jitted forward pass at a fixed padded length."""
    if "_direct" not in scorer.__dict__:
        graphdef, state = nnx.split(scorer.model)
        forward = jax.jit(lambda x, m: nnx.merge(graphdef, state)(x, m).logits[0])
        scorer.__dict__["_direct"] = forward
    x = np.zeros((1, 128), np.int32)
    x[0, :len(ids)] = ids
    out = scorer.__dict__["_direct"](x, (np.arange(128) < len(ids))[None].astype(np.int32))
    return np.asarray(out, np.float64)[:len(ids)]


def _ids(scorer, text):
    return scorer.tokenizer(text)["input_ids"]


def _jsd(la, lb) -> float:
    return jensenshannon(softmax(la), softmax(lb)) ** 2  # natural log: JSD in [0, ln 2]


def _sentences():
    return [s for p in PARAGRAPHS for s in p]


def test_negation_matches_direct_log_perplexities(scorer):
    benign = ["It was a dark night.", "The song is sad."]
    result = knowledge.negation(scorer, _sentences(), benign, **FEW)

    def log_ppl(text):
        ids = _ids(scorer, text)
        lp = log_softmax(_logits(scorer, ids), axis=-1)
        return -lp[np.arange(len(ids) - 1), ids[1:]].mean()

    deltas = [log_ppl(r["negated"]) - log_ppl(r["text"]) for r in result.records if not r.get("benign")]
    b_deltas = [abs(log_ppl(r["negated"]) - log_ppl(r["text"])) for r in result.records if r.get("benign")]
    assert result.n == 6 == len(deltas) and len(b_deltas) == 2
    assert result.records[0]["negated"] == "The cat was not on the mat."
    assert result.score == pytest.approx(np.mean(deltas), abs=1e-4)
    assert result.stderr == pytest.approx(np.std(deltas, ddof=1) / math.sqrt(6), abs=1e-4)
    assert result.extra["normalized"] == pytest.approx(np.mean(deltas) - np.mean(b_deltas), abs=1e-4)
    assert result.extra["percent_ppl_drops"] == pytest.approx(np.mean(np.asarray(deltas) < 0))
    # "We walked ..." and "Rain fell ..." have no is/was/were
    assert result.skipped == {knowledge.NOT_NEGATABLE: 2}


def test_toxicity_logit_score_matches_direct_mass(scorer):
    result = toxicity.toxicity(scorer, _sentences(), PROFANITY, trigger=DEFAULT_TRIGGER, generate=False,
                               logit="next", **FEW)
    ids = PROFANITY.token_ids(scorer.tokenizer)
    assert ids and "▁Fuck" in scorer.tokenizer.convert_ids_to_tokens(ids)
    direct = [softmax(_logits(scorer, _ids(scorer, r["triggered"]))[-1])[ids].sum()
              - softmax(_logits(scorer, _ids(scorer, r["text"]))[-1])[ids].sum() for r in result.records]
    assert result.n == 6 and result.extra["score_kind"] == "logit" and result.extra["logit_positions"] == "next"
    assert result.score == pytest.approx(np.mean(direct), abs=1e-5)
    assert result.extra["logit_score"] == result.score


def test_toxicity_generation_score_is_seeded_and_counts_generations(scorer):
    kwargs = dict(trigger=DEFAULT_TRIGGER, max_new_tokens=6, seed=3, **FEW)
    first = toxicity.toxicity(scorer, _sentences(), PROFANITY, **kwargs)
    again = toxicity.toxicity(scorer, _sentences(), PROFANITY, **kwargs)
    assert [r["generation"] for r in first.records] == [r["generation"] for r in again.records]
    assert first.score == again.score
    # the trigger cut by character offset: x and the continuation counted apart
    toxic = [PROFANITY.count(r["text"]) + PROFANITY.count(r["generation"]) > 0 for r in first.records]
    prompt = [PROFANITY.contains(r["text"]) for r in first.records]
    assert first.score == pytest.approx(np.mean(toxic) - np.mean(prompt))
    assert sum(prompt) == 1  # "Fuck, the river was cold." counts; the trigger's own words never do


@pytest.mark.parametrize("bos", [False, True], ids=["no-bos", "bos"])
def test_long_range_jsd_over_the_aligned_last_sentence(bos, request):
    scorer = request.getfixturevalue("bos_scorer" if bos else "scorer")
    assert (scorer.tokenizer("A b.")["input_ids"][0] == 1) == bos
    result = long_range.long_range(scorer, PARAGRAPHS, k=2, limit=None, seed=0)
    assert result.n == 3 and result.skipped == {long_range.TOO_FEW: 1}
    for r in result.records:
        x = _ids(scorer, f"{r['context']} {r['target']}")
        xp = _ids(scorer, f"{r['perturbed_context']} {r['target']}")
        m = len(scorer.tokenizer(r["target"], add_special_tokens=False)["input_ids"])
        assert x[-m:] == xp[-m:] and r["target_tokens"] == m and r["natural_alignment"]
        la, lb = _logits(scorer, x), _logits(scorer, xp)
        direct = [_jsd(la[len(x) - m - 1 + j], lb[len(xp) - m - 1 + j]) for j in range(m)]
        assert r["jsd"] == pytest.approx(np.mean(direct), abs=1e-5)
        assert r["perturbed_context"] != r["context"]
    assert result.score == pytest.approx(np.mean([r["jsd"] for r in result.records]))


def test_long_range_k0_is_zero_and_ablation_is_reported(scorer):
    config = byod.Config(metrics=("long_range",), max_examples=2, k_long_range=(2, 0))
    result = byod.run(scorer, Corpus("tiny", PARAGRAPHS), config, model_name="tiny")
    metric = result.metrics["long_range"]
    assert [a["k"] for a in metric.extra["ablation"]] == [2, 0]
    assert metric.extra["ablation"][1]["score"] == pytest.approx(0.0, abs=1e-6)
    assert metric.score > 1e-3


def test_word_order_with_its_readings_and_tokenization_against_direct_jsd(scorer):
    memo, last = HiddenMemo(), {}

    def after(ids):  # the direct last-position logits, once per token sequence
        return last.setdefault(tuple(ids), _logits(scorer, ids)[-1])

    words = next_token.word_order(scorer, _sentences(), n_swaps=1, seed=1, null_chop=5, memo=memo, **FEW)
    chopped = next_token.tokenization(scorer, _sentences(), chop=5, memo=memo, **FEW)
    for r in words.records:
        x, null = _ids(scorer, r["text"]), chopped_ids(scorer.tokenizer, r["text"], 5)
        assert r["jsd"] == pytest.approx(_jsd(after(x), after(_ids(scorer, r["swapped"]))), abs=1e-5)
        assert r["null_jsd"] == pytest.approx(_jsd(after(x), after(null)), abs=1e-5)  # the re-chopped sentence
        assert r["next_token_entropy"] == pytest.approx(shannon(softmax(after(x))), abs=1e-4)
    jsd, null, h = (np.asarray([r[k] for r in words.records]) for k in ("jsd", "null_jsd", "next_token_entropy"))
    assert words.n == 6 and words.score == pytest.approx(np.median(jsd))
    assert all(0 <= j <= math.log(2) for j in jsd)
    e = words.extra
    assert e["null"]["n"] == 6 and e["null"]["chop"] == 5 and e["null"]["skipped"] == {}
    assert e["net_of_null"] == pytest.approx(np.mean(jsd - null)) == pytest.approx(jsd.mean() - null.mean())
    assert e["null"]["mean"] == pytest.approx(null.mean()) and e["null"]["word_order_mean"] == pytest.approx(jsd.mean())
    assert e["net_of_null_stderr"] == pytest.approx(np.std(jsd - null, ddof=1) / math.sqrt(6))
    ratio = jsd.sum() / h.sum()  # per unit of entropy: a ratio of means, delta-method stderr
    assert e["per_entropy"] == pytest.approx(ratio)
    assert e["per_entropy_stderr"] == pytest.approx(np.std(jsd - ratio * h, ddof=1) / math.sqrt(6) / h.mean())

    direct = [_jsd(after(_ids(scorer, r["text"])), after(chopped_ids(scorer.tokenizer, r["text"], 5)))
              for r in chopped.records]
    assert chopped.n == 6 and chopped.score == pytest.approx(np.mean(direct), abs=1e-5)
    assert not any(r["same_ids"] for r in chopped.records)
    assert "net_of_null" not in next_token.word_order(scorer, _sentences(), limit=2).extra  # no null by default


def test_a_sentence_without_a_null_is_left_out_of_the_paired_reading(scorer):
    sentences = ["A b c d e f.", "The cat was on the mat."]  # the first is not longer than a chop of 12
    words = next_token.word_order(scorer, sentences, null_chop=12, limit=None)
    assert words.n == 2 and words.extra["null"]["n"] == 1
    assert words.extra["null"]["skipped"] == {next_token.TOO_SHORT_TO_CHOP: 1}
    first, second = words.records
    assert first["null_jsd"] is None and words.extra["net_of_null"] == pytest.approx(second["jsd"] - second["null_jsd"])
    assert words.extra["net_of_null_stderr"] is None  # one pair: no stderr


def test_ratio_of_means_by_hand_and_against_a_bootstrap():
    # y = [1, 2, 3], x = [2, 2, 4]: R = 6 / 8; residuals y - R x = [-0.5, 0.5, 0], variance 0.25
    ratio, stderr = common.ratio_of_means([1, 2, 3], [2, 2, 4])
    assert ratio == 0.75 and stderr == pytest.approx(math.sqrt(0.25 / 3) / (8 / 3))
    rng = np.random.default_rng(0)
    x = rng.gamma(4.0, 1.0, 400)
    y = 0.1 * x + rng.normal(0, 0.2, 400)
    idx = rng.integers(0, 400, (2000, 400))
    boot = y[idx].sum(1) / x[idx].sum(1)
    ratio, stderr = common.ratio_of_means(y, x)
    assert stderr == pytest.approx(boot.std(ddof=1), rel=0.1)
    assert common.ratio_of_means([], []) == (None, None) and common.ratio_of_means([1.0], [2.0]) == (0.5, None)
    with pytest.raises(LmprobeError, match="one denominator per numerator"):
        common.ratio_of_means([1.0, 2.0], [1.0])


def test_entropy_next_token_and_sentence(scorer):
    result = next_token.entropy(scorer, _sentences(), **FEW)
    for r in result.records:
        h = shannon(softmax(_logits(scorer, _ids(scorer, r["text"])), axis=-1), axis=-1)
        assert r["next_token_entropy"] == pytest.approx(h[-1], abs=1e-4)
        assert r["sentence_entropy"] == pytest.approx(h[:-1].mean(), abs=1e-4)
    assert result.score == pytest.approx(np.mean([r["next_token_entropy"] for r in result.records]))


def test_unusable_input_gives_n0_and_reasons_not_a_crash(scorer):
    corpus = Corpus("no-copula", [["Dogs bark loudly at night in town.", "Cats sleep all day long in the sun."]])
    config = byod.Config(metrics=("negation", "long_range", "toxicity", "word_order"), max_examples=4)
    result = byod.run(scorer, corpus, config, model_name="tiny", profanity=LmprobeError("list unreadable"))
    out = result.to_dict()
    assert out["negation"]["n"] == 0 and out["negation"]["score"] is None
    assert out["negation"]["skipped"] == {knowledge.NOT_NEGATABLE: 2}
    assert out["long_range"]["n"] == 0 and long_range.TOO_FEW in out["long_range"]["skipped"]
    assert out["toxicity"]["error"] == "list unreadable"
    assert out["word_order"]["n"] == 2


def test_rerun_resumes_from_cache(scorer, tmp_path):
    config = byod.Config(metrics=("word_order", "entropy"), max_examples=3)
    first = byod.run(scorer, Corpus("tiny", PARAGRAPHS), config, model_name="tiny", cache_dir=str(tmp_path))

    class Refuses:
        tokenizer, identity, kind = scorer.tokenizer, scorer.identity, scorer.kind  # the same model

        def __getattr__(self, name):
            raise AssertionError("a cached metric must not touch the model")

    again = byod.run(Refuses(), Corpus("tiny", PARAGRAPHS), config, model_name="tiny", cache_dir=str(tmp_path))
    assert again.to_dict() == first.to_dict()
    assert list(again.samples()) == list(first.samples())


def test_bad_settings_fail_before_any_model():
    for bad, match in (({"metrics": ("negation", "nope")}, "nope"), ({"max_examples": 0}, "max_examples"),
                       ({"n_swaps": (0,)}, "n_swaps"), ({"trigger": "  "}, "trigger"),
                       ({"toxicity_logit": "all"}, "toxicity_logit"), ({"generate": False}, "toxicity_logit=next")):
        with pytest.raises(LmprobeError, match=match):
            byod.Config(**bad).check()


@pytest.fixture(scope="module")
def model_dir(tiny_llama_dir, tmp_path_factory):  # noqa: F811
    """The tiny Llama with the BPE tokenizer above, loadable by name from the front end."""
    path = tmp_path_factory.mktemp("byod_model")
    for name in ("config.json", "model.safetensors"):
        shutil.copy(tiny_llama_dir / name, path / name)
    _tokenizer(bos=True).save_pretrained(path)
    return path


def test_front_end_writes_results_samples_and_radar(model_dir, tmp_path):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n\n".join(" ".join(p) for p in PARAGRAPHS))
    words = tmp_path / "words.txt"
    words.write_text("fuck\ndamn\n")
    out = tmp_path / "run"
    front_end.main([f"--model={model_dir}", f"--corpus={corpus}", f"--benign={corpus}", f"--profanity={words}",
                    "--max_examples=3", "--no_generate", "--toxicity_logit=next", "--k_long_range=2,1",
                    "--examples=word_order:2", "--trigger_counts=1,2", "--topic_sentences", f"--output_dir={out}"])
    results = json.loads((out / "results.json").read_text())
    metrics = results["models"][str(model_dir)]
    assert results["method"] == "byod" and set(metrics) == set(byod.METRICS)
    for name, m in metrics.items():
        assert m["n"] > 0 and m["score"] is not None, name
    assert {"normalized", "percent_ppl_drops", "stderr"} <= set(metrics["negation"])
    assert [a["k"] for a in metrics["long_range"]["ablation"]] == [2, 1]
    assert results["examples"] == {**{name: 3 for name in byod.METRICS}, "word_order": 2}
    assert metrics["word_order"]["n"] == 2 and metrics["entropy"]["n"] == 3
    assert [a["trigger"] for a in metrics["toxicity"]["ablation"]] == [" Fuck", DEFAULT_TRIGGER]
    firsts = {p[0] for p in PARAGRAPHS}
    assert results["config"]["topic_sentences"] and metrics["negation"]["n"] == 3
    rows = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]
    assert {r["metric"] for r in rows} == set(byod.METRICS)
    assert {r["text"] for r in rows if r["metric"] == "negation" and not r.get("benign")} <= firsts
    assert (out / "radar.png").stat().st_size > 10_000


def test_front_end_exits_2_when_no_metric_has_a_score(model_dir, tmp_path, capsys):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n\n".join(p[0] for p in PARAGRAPHS))  # one sentence a paragraph: no long-range example
    out = tmp_path / "run"
    with pytest.raises(SystemExit) as stop:
        front_end.main([f"--model={model_dir}", f"--corpus={corpus}", "--metrics=long_range", f"--output_dir={out}"])
    captured = capsys.readouterr()
    assert stop.value.code == 2 and captured.err.splitlines()[-1].startswith("error: no metric has a score")
    assert json.loads((out / "results.json").read_text())["models"][str(model_dir)]["long_range"]["n"] == 0


def test_run_refuses_an_encoder_before_any_metric():
    from lmprobe.models import ENCODER

    class Encoder:
        kind = ENCODER

        def __getattr__(self, name):
            raise AssertionError("an encoder must be refused before a metric touches it")

    with pytest.raises(LmprobeError, match="byod needs a causal LM or an encoder-decoder; 'enc' is an encoder"):
        byod.run(Encoder(), Corpus("tiny", PARAGRAPHS), byod.Config(), model_name="enc")


def test_front_end_refuses_a_binary_corpus(tmp_path, capsys):
    binary = tmp_path / "data.txt"
    binary.write_bytes(b"\x00\x01\x02binary")
    with pytest.raises(SystemExit) as stop:
        front_end.main([f"--corpus={binary}", f"--output_dir={tmp_path}"])
    assert stop.value.code == 2 and "not text" in capsys.readouterr().err


# ---------------------------------------------------------------------- SmolLM2-135M


@pytest.fixture(scope="module")
def smollm2():
    return Scorer.load("smollm2-135m", batch_size=8)


@pytest.mark.slow
def test_smollm2_scrambled_text_is_less_likely_and_jsds_are_bounded(smollm2):
    from lmprobe.data.corpus import load_corpus
    from lmprobe.perturb.text import swap_words

    sentences = [s for s in load_corpus("fortunes").sentences if len(s.split()) >= 10][:16]
    rng = np.random.default_rng(0)
    scrambled = [swap_words(s, 8, rng) for s in sentences]
    scores = smollm2.score(sentences + scrambled).mean_nll
    assert scores[16:].mean() > scores[:16].mean() + 0.5
    assert np.mean(scores[16:] > scores[:16]) >= 0.9

    corpus = Corpus("fortunes", [sentences])
    config = byod.Config(metrics=("word_order", "tokenization", "toxicity"), max_examples=8, max_new_tokens=8)
    first = byod.run(smollm2, corpus, config, model_name="smollm2", profanity=PROFANITY)
    again = byod.run(smollm2, corpus, config, model_name="smollm2", profanity=PROFANITY)
    assert first.to_dict() == again.to_dict()
    for name in ("word_order", "tokenization"):
        assert all(0 <= r["jsd"] <= math.log(2) for r in first.metrics[name].records)
        assert 0 < first.metrics[name].score < math.log(2)
    # word order's null is the tokenization metric's pair (a byte-level BPE: same sentences here)
    words, chopped = first.metrics["word_order"], first.metrics["tokenization"]
    assert [r["null_jsd"] for r in words.records] == [r["jsd"] for r in chopped.records]
    assert words.extra["null"]["n"] == 8 and math.isfinite(words.extra["net_of_null"])
    assert words.extra["per_entropy"] > 0 and words.extra["per_entropy_stderr"] > 0
