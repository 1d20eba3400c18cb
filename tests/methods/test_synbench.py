"""SynBench: known answers (identity ~ 1, noise ~ 0), theory vs Monte Carlo, no d x d arrays,
bad input, reproducibility, caching, and the front end on tiny models."""

import json
import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.linalg import block_diag, toeplitz
from scipy.stats import chi2, ncx2, norm

from lmprobe import kernels
from lmprobe.cli import synbench as front_end
from lmprobe.data import gaussian
from lmprobe.errors import LmprobeError
from lmprobe.methods import synbench
from tests.engine.conftest import tiny_llama_dir  # noqa: F401  (fixture)

FAST = {"n": 1024, "batch_size": 1024}


def _noise(x):  # a deterministic function of the input that keeps none of its signal
    seed = jnp.sum(jnp.abs(x) * 1e3).astype(jnp.uint32)
    return jax.random.normal(jax.random.fold_in(jax.random.PRNGKey(7), seed), (x.shape[0], 16))


@pytest.fixture(scope="module")
def identity_result():
    return synbench.run(synbench.identity_representation((8,), batch_size=1024), synbench.Config(**FAST))


def test_identity_scores_about_one_at_every_threshold(identity_result):
    at_zero = [r["score"] for r in identity_result.scores if r["eps"] == 0]
    assert len(at_zero) == len(synbench.PAPER_THRESHOLDS) == 6  # the tables: 0.6, 0.7, 0.75, 0.8, 0.85, 0.9
    np.testing.assert_allclose(at_zero, 1.0, atol=0.03)
    # relative budgets leave an isotropic problem's classifier unchanged: ~1 for every eps
    np.testing.assert_allclose([r["score"] for r in identity_result.scores], 1.0, atol=0.03)
    corrected = [r["score_corrected"] for r in identity_result.scores if r["eps"] == 0]
    np.testing.assert_allclose(corrected, 1.0, atol=0.03)
    assert identity_result.representation["corrected"] == {"samples": 2048, "k": 8, "reason": None}
    assert synbench.ceiling(8, synbench.Config(**FAST)).scores == identity_result.scores  # the same identity


def test_pure_noise_scores_about_zero():
    result = synbench.run(synbench.function_representation("noise", _noise, (16,), batch_size=1024),
                          synbench.Config(**FAST, epsilons=(0.0, 0.4)))
    assert max(r["score"] for r in result.scores) < 0.02


def test_constant_or_nan_representations_are_errors():
    config = synbench.Config(n=16, batch_size=16, scales=(1.0, 5.0), a_t=(0.7,))
    constant = synbench.function_representation("const", lambda x: jnp.ones((x.shape[0], 4)), (8,), batch_size=16)
    with pytest.raises(LmprobeError, match="zero variance"):
        synbench.run(constant, config)
    nan = synbench.function_representation("nan", lambda x: x / 0.0 * 0.0, (8,), batch_size=16)
    with pytest.raises(LmprobeError, match="NaN"):
        synbench.run(nan, config)


def test_bad_settings_fail_before_any_model():
    for bad, match in (({"a_t": (0.5,)}, r"\(0.5, 1\)"), ({"a_t": (1.0,)}, r"\(0.5, 1\)"),
                       ({"epsilons": (0.0, 1.0)}, "must be < 1"),
                       ({"epsilons": (6.0,), "relative_epsilon": False}, "class-mean half-distance"),
                       ({"norm": 3.0}, "p in 1, 2, inf"), ({"covariance": "band", "norm": 1.0}, "l2 budgets only"),
                       ({"prior": 0.0}, "tau=0.0")):
        with pytest.raises(LmprobeError, match=match):
            synbench.Config(**bad).check()
    config = synbench.Config(a_t=(0.9999999,), scales=(0.1, 1.0))
    with pytest.raises(LmprobeError, match="best raw-data accuracy"):
        synbench.run(synbench.identity_representation((4,)), config)


def test_lp_budgets_wider_than_the_sample_fail_after_the_first_split():
    """An l_p budget (p != 2) needs n >= the representation's width: said once the first split is embedded, not
    after every scale's two splits (a model's embeddings are the run's cost)."""
    calls = []
    counted = synbench.function_representation("wide", lambda x: calls.append(len(x)) or x, (16,), batch_size=8)
    config = synbench.Config(n=8, batch_size=8, scales=(0.5, 1.0, 2.0), norm=1.0, epsilons=(0.0, 0.1))
    with pytest.raises(LmprobeError, match=r"need n >= representation size: n=8, size 16; raise `n`"):
        synbench.run(counted, config)
    assert calls == [8, 9]  # one batch of the first split, of six splits (traced, and at 9 rows: check_batch_axis)


def test_absolute_eps_beyond_every_class_mean_distance_is_an_error():
    shrink = synbench.function_representation("shrink", lambda x: 1e-3 * x, (8,), batch_size=256)
    config = synbench.Config(n=256, batch_size=256, epsilons=(0.0, 0.5), relative_epsilon=False, a_t=(0.7,))
    with pytest.raises(LmprobeError, match="eps=0.5 exceeds the class-mean half-distance"):
        synbench.run(shrink, config)


def test_raw_reference_matches_monte_carlo_balanced_and_imbalanced():
    rng = np.random.default_rng(0)
    for tau in (0.5, 0.25):
        config = synbench.Config(scales=(0.5, 1.5), epsilons=(0.0, 0.4), prior=tau)
        ref = synbench.raw_reference(config, gaussian.GaussianSpec((10,), prior=tau))
        half_q = 0.5 * np.log((1 - tau) / tau)
        for i, s in enumerate(config.scales):
            for j, eps in enumerate(config.epsilons):
                y = np.where(rng.random(400_000) < tau, 1, -1)
                t = y * s + rng.normal(size=y.size)  # x - c along mu / ||mu||; the rest is noise
                w = s * (1 - eps)  # ||w|| of w = mu (1 - eps) (relative budget eps ||mu||)
                score = w * t - half_q
                correct = np.sign(score) == y
                assert ref.accuracy[i, j] == pytest.approx(correct.mean(), abs=3e-3)
                bound = np.abs(score[correct]) / abs(s * w - half_q)
                assert ref.bound[i, j] == pytest.approx(bound.mean(), rel=1e-2)


def test_imbalanced_formulas_reduce_to_balanced_at_one_half():
    config = synbench.Config(scales=gaussian.PAPER_SCALES, epsilons=(0.0, 0.6))
    ref = synbench.raw_reference(config, gaussian.GaussianSpec((10,)))
    a = norm.cdf(np.asarray(config.scales))
    np.testing.assert_allclose(ref.accuracy, np.stack([a, a], 1), atol=1e-6)
    expected = np.asarray(kernels.expected_scaled_bound(jnp.asarray(a, jnp.float32)))
    finite = a < 1 - 1e-6  # Thm 1(iv) is 0/0 in float32 once Phi(s) rounds to 1
    np.testing.assert_allclose(ref.bound[finite, 0], expected[finite], rtol=1e-4)
    s, e = jnp.linspace(0.2, 4.0, 20), 0.1
    np.testing.assert_allclose(kernels.imbalanced_accuracy(s, e, 0.5), kernels.gaussian_accuracy(s), atol=1e-6)


def test_band_reference_matches_dense_solution_and_monte_carlo():
    band = (1.0, 0.5, 0.25)
    spec = gaussian.GaussianSpec((2, 12), covariance="band", band=band, channel_axis=0)
    config = synbench.Config(scales=(0.8, 2.0), epsilons=(0.0, 0.5), covariance="band", band=band)
    ref = synbench.raw_reference(config, spec)
    block = toeplitz(np.r_[band, np.zeros(9)])
    sigma = block_diag(block, block)
    vals, vecs = np.linalg.eigh(sigma)
    u = np.ones(24) / np.sqrt(24)
    for i, s in enumerate(config.scales):
        x, y = (np.asarray(v) for v in gaussian.sample(spec, s, seed=3, split="test", start=0, count=40_000))
        t = x.reshape(len(x), -1)
        for j, eps in enumerate(config.epsilons):
            robust = kernels.robust_direction(jnp.asarray(vecs.T @ (s * u)), jnp.asarray(vals), eps,
                                              relative_epsilon=True)
            w = vecs @ np.asarray(robust.weight, np.float64)
            dense = norm.cdf(s * u @ w / np.sqrt(w @ sigma @ w))
            assert ref.accuracy[i, j] == pytest.approx(dense, abs=1e-5)
            score = t @ w
            correct = np.sign(score) == y
            assert ref.accuracy[i, j] == pytest.approx(correct.mean(), abs=0.01)
            assert ref.bound[i, j] == pytest.approx(np.mean(np.abs(score[correct])) / (s * u @ w), rel=0.02)


def test_band_identity_representation_scores_about_one():
    result = synbench.run(synbench.identity_representation((2, 8), channel_axis=0, batch_size=1024),
                          synbench.Config(**FAST, covariance="band", epsilons=(0.0, 0.4), a_t=(0.7,)))
    np.testing.assert_allclose([r["score"] for r in result.scores], 1.0, atol=0.03)


def test_wide_representations_use_the_support_and_match_the_full_fit():
    rng = np.random.default_rng(1)
    y = np.where(rng.random((1, 40)) < 0.5, 1, -1).astype(np.int32)
    z = rng.normal(size=(1, 40, 60)).astype(np.float32) + 0.8 * y[..., None]
    zt = rng.normal(size=(1, 50, 60)).astype(np.float32) + 0.8 * (yt := -y[:, :1].repeat(50, 1))[..., None]
    config = synbench.Config(epsilons=(0.0, 0.3))
    thin = synbench.representation_summary(z, y, zt, yt, config)
    full = kernels.synbench_accuracy_bound(z[0], y[0], zt[0], yt[0], jnp.asarray([0.0, 0.3]), relative_epsilon=True)
    np.testing.assert_allclose(thin.accuracy[0], full.accuracy, atol=1e-6)
    np.testing.assert_allclose(thin.mean_scaled_margin[0], full.mean_scaled_margin, rtol=2e-3)


def test_scores_do_not_depend_on_the_units_of_the_representation():
    rng = np.random.default_rng(3)
    y = np.where(rng.random((2, 200)) < 0.5, 1, -1).astype(np.int32)
    z = (rng.normal(size=(2, 200, 8)) + 0.5 * y[..., None]).astype(np.float32)
    config = synbench.Config(epsilons=(0.0, 0.4))
    big = synbench.representation_summary(z, y, z, y, config)
    tiny = synbench.representation_summary(1e-4 * z, y, 1e-4 * z, y, config)
    np.testing.assert_allclose(tiny.accuracy, big.accuracy, atol=1e-6)
    np.testing.assert_allclose(tiny.mean_scaled_margin, big.mean_scaled_margin, rtol=1e-3)


def test_lp_budget_at_zero_is_the_bayes_classifier():
    rng = np.random.default_rng(2)
    y = np.where(rng.random((2, 300)) < 0.5, 1, -1).astype(np.int32)
    z = (rng.normal(size=(2, 300, 6)) + 0.7 * y[..., None]).astype(np.float32)
    l2 = synbench.representation_summary(z, y, z, y, synbench.Config(epsilons=(0.0,)))
    linf = synbench.representation_summary(z, y, z, y, synbench.Config(epsilons=(0.0, 0.3), norm=float("inf")))
    np.testing.assert_allclose(linf.accuracy[:, 0], l2.accuracy[:, 0], atol=1e-6)
    np.testing.assert_allclose(linf.mean_scaled_margin[:, 0], l2.mean_scaled_margin[:, 0], rtol=1e-3)
    assert np.all(np.asarray(linf.accuracy[:, 1]) > 0.6)


def test_same_seed_same_numbers_and_cached_reruns(tmp_path):
    config = synbench.Config(n=256, batch_size=64, scales=(0.5, 1.5, 3.0), a_t=(0.7,), epsilons=(0.0, 0.4))
    first = synbench.run(synbench.identity_representation((8,), batch_size=64), config, cache_dir=str(tmp_path))
    other_batches = synbench.Config(**{**config.__dict__, "batch_size": 100})
    again = synbench.run(synbench.identity_representation((8,), batch_size=100), other_batches)
    assert [r["score"] for r in first.scores] == [r["score"] for r in again.scores]

    def broken(x):
        raise AssertionError("the cache should have answered")

    resumed = synbench.run(synbench.function_representation("identity", broken, (8,), batch_size=64), config,
                           cache_dir=str(tmp_path))
    assert [r["score"] for r in resumed.scores] == [r["score"] for r in first.scores]


def test_image_sized_inputs_need_no_d_by_d_array():
    """d = 3 x 224 x 224 with the band covariance and the identity network: a d x d float32
    matrix would take 90 GB; the whole run must stay within a few GB."""
    code = textwrap.dedent("""
        import jax
        jax.config.update("jax_platforms", "cpu")
        from lmprobe.methods import synbench
        rep = synbench.identity_representation((3, 224, 224), channel_axis=0, offset=0.5, batch_size=8)
        config = synbench.Config(n=8, batch_size=8, scales=(2.0, 5.0), epsilons=(0.0, 0.4), a_t=(0.7,),
                                 covariance="band")
        result = synbench.run(rep, config)
        assert result.representation["dim"] == 150528
        # VmHWM is this process's own peak; ru_maxrss would carry over pytest's RSS across fork + exec
        print(next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmHWM")) * 1024)
    """)
    out = subprocess.run([sys.executable, "-c", code], check=False, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    peak = int(out.stdout.split()[-1])
    assert peak < 4e9 < 150528**2 * 4


def test_front_end_on_a_tiny_language_model(tiny_llama_dir, tmp_path):  # noqa: F811
    argv = ["--model", str(tiny_llama_dir), "--n", "16", "--scales", "1,3,5", "--a_t", "0.7", "--eps", "0,0.4",
            "--batch_size", "16", "--output_dir", str(tmp_path)]
    front_end.main(argv)
    result = json.loads((tmp_path / "results.json").read_text())
    assert result["method"] == "synbench" and result["model"] == str(tiny_llama_dir)
    assert {(r["eps"], r["a_t"]) for r in result["scores"]} == {(0.0, 0.7), (0.4, 0.7)}
    assert all(np.isfinite(r["score"]) for r in result["scores"])
    assert result["representation"]["input_shape"] == [synbench.DEFAULT_SEQ_LEN, 64]
    rep = result["representation"]
    assert rep["pooling"] == "last" and rep["inputs"] == "embedding" and rep["input_scale"] == 1.0
    # 2 x 16 samples cannot correct a width-64 distance: no corrected score, and the reason why
    assert [r["score_corrected"] for r in result["scores"] if r["eps"] == 0] == [None]
    assert "n1 + n2 - k - 3 = -35" in rep["corrected"]["reason"]
    assert set(result["curves"]) >= {"a", "E_raw", "E_rep", "rep_accuracy", "raw_accuracy"}
    assert result["config"]["n"] == 16 and "0.7" in result["argmax_eps"]
    assert (tmp_path / "bound_threshold.png").stat().st_size > 0
    front_end.main(argv)  # resumes from the cache
    assert json.loads((tmp_path / "results.json").read_text())["scores"] == result["scores"]


def test_front_end_rejects_bad_flags_before_loading(capsys):
    with pytest.raises(SystemExit):
        front_end.main(["--model", "no/such-model", "--a_t", "1.2"])
    assert "a_t=[1.2]" in capsys.readouterr().err


def test_front_end_on_a_tiny_vit(tmp_path):
    from transformers import ViTConfig, ViTModel

    from tests.models.parity import save_random

    path = tmp_path / "vit"
    save_random(ViTModel, ViTConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
                                    image_size=16, patch_size=8, num_channels=3), path)
    (path / "preprocessor_config.json").write_text(json.dumps({"image_mean": [0.4, 0.5, 0.6], "image_std": [0.2] * 3}))
    out = tmp_path / "run"
    front_end.main(["--model", str(path), "--n", "16", "--scales", "1,5", "--a_t", "0.7", "--eps", "0",
                    "--batch_size", "8", "--covariance", "band", "--output_dir", str(out)])
    result = json.loads((out / "results.json").read_text())
    rep = result["representation"]
    assert rep["input_shape"] == [3, 16, 16] and rep["channel_axis"] == 0 and rep["dim"] == 32
    assert rep["pooling"] == "cls" and rep["mean"] == pytest.approx([0.4, 0.5, 0.6]) and rep["offset"] == 0.5
    assert np.isfinite(result["scores"][0]["score"])


class LayerNormEncoder:
    """Stands in for an encoder fed input embeddings: a LayerNorm over each token's hidden
    coordinates (BERT's embedding LayerNorm), then the mean over tokens. Its token embeddings
    have RMS 0.05; it records the inputs it was fed."""

    is_decoder = False
    config = type("Config", (), {"hidden_size": 48, "vocab_size": 100})
    model = type("Model", (), {"embed": staticmethod(lambda ids: jnp.full((len(ids), 48), 0.05).at[:, ::2].mul(-1))})
    fed: list = []

    def embed_inputs(self, x, pooling, layer):
        self.fed.append(np.asarray(x))
        return _layernorm_mean(jnp.asarray(x))


def _layernorm_mean(x):
    return ((x - x.mean(-1, keepdims=True)) / jnp.sqrt(x.var(-1, keepdims=True) + 1e-5)).mean(1)


def test_a_layernorm_first_encoder_sees_the_class_signal():
    # the class mean is constant across coordinates: fed as is, the LayerNorm subtracts it and the
    # score is 0 whatever the model; the balanced signs keep it (an identity-like encoder: about 1)
    config = synbench.Config(n=1024, batch_size=256, scales=(0.5, 1.0, 2.0, 3.0), a_t=(0.7,), epsilons=(0.0,))
    rep = synbench.scorer_representation(LayerNormEncoder(), "layernorm", seq_len=8, inputs="rms", identity={})
    assert synbench.run(rep, config).scores[0]["score"] > 0.8
    unsigned = synbench.function_representation("no signs", _layernorm_mean, (8, 48), batch_size=256)
    assert synbench.run(unsigned, config).scores[0]["score"] == 0.0
    signs = synbench.balanced_signs(48)
    assert signs.sum() == 0 and set(signs.tolist()) == {-1.0, 1.0} and synbench.balanced_signs(5).sum() == 1


def test_language_model_inputs_are_scaled_to_its_token_embeddings():
    encoder = LayerNormEncoder()
    assert synbench.token_embedding_rms(encoder) == pytest.approx(0.05)
    config = synbench.Config(n=64, batch_size=64, scales=(1.0,), a_t=(0.7,), epsilons=(0.0,))
    for scale, expected in ((None, 0.05), (2.0, 2.0)):
        encoder.fed.clear()
        rep = synbench.scorer_representation(encoder, "layernorm", seq_len=8, inputs="rms", input_scale=scale,
                                             identity={})
        assert rep.settings["input_scale"] == pytest.approx(expected)
        synbench.represent(rep, config, 1.0, "train")
        fed = np.concatenate(encoder.fed)  # unit-variance Gaussians times +-scale: RMS about the scale
        assert np.sqrt((fed ** 2).mean()) == pytest.approx(expected, rel=0.05)
    with pytest.raises(LmprobeError, match="input_scale"):
        synbench.scorer_representation(encoder, "layernorm", inputs="rms", input_scale=0.0, identity={})


# ------------------------------------------------------------------ bias-corrected score at eps = 0

KNOWN_FRACTION = 0.074  # signal_fraction_representation keeping this much of the class signal: true score 0.40


def _sampled_squared_distances(k, n, half, seed):
    """Plug-in D^2 of k-dimensional Gaussian classes at Mahalanobis half-distances ``half`` [S] from
    n samples, drawn from its exact law: D^2 = (n - 2) c X / Y, c = 1/n1 + 1/n2, X ~ noncentral
    chi2_k(4 half^2 / c), Y ~ chi2_{n-k-1} (Wishart: a^T W^-1 a = |a|^2 / chi2_{m-k+1})."""
    rng = np.random.default_rng(seed)
    n1 = rng.binomial(n, 0.5, size=len(half))
    c = 1.0 / n1 + 1.0 / (n - n1)
    x = ncx2.rvs(k, 4 * np.square(half) / c, random_state=rng)
    return (n - 2) * c * x / chi2.rvs(n - k - 1, size=len(half), random_state=rng), n1, n - n1


def _corrected_score(k, n, half, config, seed=0):
    d2, n1, n2 = _sampled_squared_distances(k, n, half, seed)
    accuracy, bound = synbench.bayes_accuracy_bound(synbench.unbiased_squared_distance(d2, n1, n2, k))
    return synbench.eps0_scores(accuracy, bound, synbench.raw_reference(config, gaussian.GaussianSpec((k,))),
                                config)[0]


def test_unbiased_distance_has_the_true_mean_on_gaussian_samples():
    rng = np.random.default_rng(0)
    k, n, reps, delta2 = 6, 24, 600, 4.0
    y = np.where(np.arange(n) < n // 2, 1, -1).astype(np.int32)[None].repeat(reps, 0)
    z = rng.normal(size=(reps, n, k)) + (np.sqrt(delta2) / 2) * y[..., None] * np.eye(k)[0]
    d2, n1, n2, dims = synbench.squared_distances(z, y)
    diff = z[0, :12].mean(0) - z[0, 12:].mean(0)
    pooled = (np.cov(z[0, :12].T) + np.cov(z[0, 12:].T)) / 2
    assert d2[0] == pytest.approx(diff @ np.linalg.solve(pooled, diff), rel=1e-4)  # float64 numpy
    assert set(n1) == set(n2) == {12} and set(dims) == {k}
    c = 1 / 12 + 1 / 12
    stderr = d2.std() / np.sqrt(reps)  # E[D^2] = (n-2)/(n-k-3) (Delta^2 + k c): 9.26 here, 2.3 x Delta^2
    assert d2.mean() == pytest.approx((n - 2) / (n - k - 3) * (delta2 + k * c), abs=4 * stderr)
    unbiased = synbench.unbiased_squared_distance(d2, n1, n2, k)
    assert unbiased.mean() == pytest.approx(delta2, abs=4 * unbiased.std() / np.sqrt(reps))
    assert np.isnan(synbench.unbiased_squared_distance(5.0, 10, 10, 17)) and synbench.unbiased_squared_distance(
        0.1, 100, 100, 10) == 0.0  # undefined at n - k - 3 <= 0; clipped at 0


def test_corrected_identity_scores_one_from_width_64_to_1024():
    # the identity at n = 2048 per split (D^2 over both): its distance is the raw data's, 2 s
    config = synbench.Config(a_t=(0.7,), epsilons=(0.0,))
    scales = np.asarray(config.scales)
    for k in (64, 256, 1024):
        for n in (4096, 2048):  # both splits, and one split's worth
            assert _corrected_score(k, n, scales, config, seed=k) == pytest.approx(1.0, abs=0.03)
    np.testing.assert_allclose(synbench.population_scores(scales, synbench.Config()), 1.0, atol=1e-6)


def test_corrected_score_recovers_a_known_score_at_two_widths():
    config = synbench.Config(a_t=(0.7,), epsilons=(0.0,))
    half = np.sqrt(KNOWN_FRACTION) * np.asarray(config.scales)
    truth = synbench.population_scores(half, config)[0]
    assert truth == pytest.approx(0.40, abs=0.005)
    for k in (384, 768):
        got = [_corrected_score(k, 4096, half, config, seed) for seed in range(3)]
        np.testing.assert_allclose(got, truth, atol=0.03)


def test_known_score_representation_plug_in_low_corrected_right():
    """160 samples per split at width 48 (width / n as 614 / 2048): the plug-in loses half of the
    true score, the corrected score does not. The arrays have the [1024, 48] shape of
    test_a_layernorm_first_encoder_sees_the_class_signal (no compiles), rows past 160 padding."""
    config = synbench.Config(a_t=(0.7,), epsilons=(0.0,), scales=gaussian.PAPER_SCALES[::4])
    rep = synbench.signal_fraction_representation(48, KNOWN_FRACTION)
    u = np.full((1, 64), 1 / np.sqrt(64), np.float32)  # the class-mean direction keeps sqrt(fraction) of its norm
    assert np.linalg.norm(rep.fn(u)) == pytest.approx(np.sqrt(KNOWN_FRACTION), rel=1e-5)
    rng = np.random.default_rng(0)
    half = np.sqrt(KNOWN_FRACTION) * np.asarray(config.scales)  # rep.fn's classes: N(+-half e_1, I_48)
    z, y = [], []
    for _ in range(2):
        labels = np.where(rng.random((len(half), 1024)) < 0.5, 1, -1).astype(np.int32)
        labels[:, 160:] = 0
        z.append((rng.normal(size=(len(half), 1024, 48)) + (half[:, None] * labels)[..., None] * np.eye(48)[0])
                 .astype(np.float32))
        y.append(labels)
    raw = synbench.raw_reference(config, gaussian.GaussianSpec((64,)))
    summary = synbench.representation_summary(z[0], y[0], z[1], y[1], config)
    plug_in = synbench.synbench_scores(np.asarray(summary.accuracy), np.asarray(summary.mean_scaled_margin), raw,
                                       config)[0, 0]
    fixed = synbench.corrected_summary(z[0], y[0], z[1], y[1], config)
    assert fixed.samples == 320 and fixed.k == 48 and fixed.reason is None
    corrected = synbench.eps0_scores(fixed.accuracy, fixed.bound, raw, config)[0]
    truth = synbench.population_scores(half, config)[0]
    assert plug_in < truth - 0.15 and corrected == pytest.approx(truth, abs=0.05)


def test_the_corrected_scores_standard_error_matches_its_spread_over_datasets():
    """Seeded simulation: 120 independent datasets of Gaussian classes (16 dimensions, 3 scales,
    300 samples per split); the standard error from one dataset, averaged over 20, is within 20% of
    the corrected score's standard deviation across datasets."""
    config = synbench.Config(scales=(1.0, 2.0, 3.0), a_t=(0.7,), epsilons=(0.0,), n=300)
    raw = synbench.raw_reference(config, gaussian.GaussianSpec((16,)))
    rng = np.random.default_rng(0)
    half = np.array([0.25, 0.5, 0.75])
    scores, errors = [], []
    for trial in range(120):
        z, y = [], []
        for _ in range(2):
            labels = np.where(rng.random((3, 300)) < 0.5, 1, -1).astype(np.int32)
            z.append((rng.normal(size=(3, 300, 16)) + (half[:, None] * labels)[..., None] * np.eye(16)[0])
                     .astype(np.float32))
            y.append(labels)
        summary = synbench.corrected_summary(z[0], y[0], z[1], y[1], config)
        scores.append(synbench.eps0_scores(summary.accuracy, summary.bound, raw, config)[0])
        if trial < 20:
            errors.append(synbench.corrected_stderr(summary, raw, config, seed=trial)[0])
    assert np.mean(errors) == pytest.approx(np.std(scores, ddof=1), rel=0.2)
    assert np.mean(scores) == pytest.approx(synbench.population_scores(half, config)[0], abs=0.01)


def test_sample_size_helpers_and_the_undefined_case():
    assert synbench.n_for_width(384) == 7680 and synbench.n_for_width(768, ratio=10) == 7680
    assert synbench.n_for_width(1, ratio=1) == 8
    synbench.check_sample_size(64, synbench.Config(n=34))
    with pytest.raises(LmprobeError, match=r"n=33 samples per split is too few .* width 64.* n >= 1280"):
        synbench.check_sample_size(64, synbench.Config(n=33))
    rng = np.random.default_rng(0)
    y = np.where(rng.random((2, 20)) < 0.5, 1, -1).astype(np.int32)
    z = rng.normal(size=(2, 20, 40)).astype(np.float32)
    summary = synbench.corrected_summary(z, y, z, y, synbench.Config())
    assert np.all(np.isnan(summary.accuracy)) and summary.samples == 40 and "= -3 <= 0" in summary.reason


class EmbeddingEncoder:
    """An encoder whose token embeddings have a mean and an anisotropic covariance; it returns the
    mean over tokens of its inputs and records them."""

    is_decoder = False
    config = type("Config", (), {"hidden_size": 48, "vocab_size": 400})
    table = np.random.default_rng(5).normal(size=(400, 48)) * np.linspace(0.2, 3.0, 48) + 0.7
    model = type("Model", (), {"embed": staticmethod(lambda ids: jnp.asarray(EmbeddingEncoder.table)[ids])})
    fed: list = []

    def embed_inputs(self, x, pooling, layer):
        self.fed.append(np.asarray(x))
        return np.asarray(x).mean(1)


def test_language_model_inputs_have_the_token_embeddings_moments_and_a_scale_sweep():
    encoder = EmbeddingEncoder()  # the shapes of test_a_layernorm_first_encoder_sees_the_class_signal: no compiles
    config = synbench.Config(n=1024, batch_size=256, scales=(0.5, 1.0, 2.0, 3.0), a_t=(0.7,), epsilons=(0.0,))
    sweep = synbench.input_scale_sweep(encoder, "emb", config, (1.0, 2.0), seq_len=8, identity={})
    assert list(sweep) == [1.0, 2.0] and [r.representation["input_scale"] for r in sweep.values()] == [1.0, 2.0]
    rep = synbench.scorer_representation(encoder, "emb", seq_len=8, identity={})
    assert rep.settings["inputs"] == "embedding" and rep.settings["input_scale"] == 1.0
    assert rep.settings["pooling"] == "first_last_avg" and rep.settings["layer"] == -1  # the probes' features
    encoder.fed.clear()
    synbench.represent(rep, config, 0.01, "train")
    tokens = np.concatenate(encoder.fed).reshape(-1, 48)
    np.testing.assert_allclose(tokens.mean(0), encoder.table.mean(0), atol=0.1)
    np.testing.assert_allclose(np.cov(tokens.T), np.cov(encoder.table.T), atol=0.1 * np.cov(encoder.table.T).max())
    with pytest.raises(LmprobeError, match="singular covariance.*`inputs=rms`"):
        synbench.scorer_representation(LayerNormEncoder(), "layernorm", identity={})  # every token alike
