"""SynBench's robust linear probing (Sec. 4, Table 6) and loss-data baselines (App. G): the
closed forms of the identity on isotropic data, one eps convention end to end, held-out
downstream data, the front end."""

import json

import jax.numpy as jnp
import numpy as np
import pytest
from scipy.stats import norm

from lmprobe.cli import synbench as front_end
from lmprobe.errors import LmprobeError
from lmprobe.methods import loss_data, robust_probe, synbench

SMALL = {"n": 512, "batch_size": 512, "scales": (0.5, 1.0, 2.0, 3.0, 4.0, 5.0), "a_t": (0.7,),
         "epsilons": (0.0, 0.3)}


def test_identity_probe_at_the_argmax_eps_matches_the_closed_form():
    config = synbench.Config(**SMALL, robust_probe=True, probe_scale=1.5, probe_n=4096, probe_steps=300)
    result = synbench.run(synbench.identity_representation((4,), batch_size=512), config).to_dict()
    probe = result["robust_probe"]
    eps = robust_probe.suggest_epsilon(result["scores"], 0.7)
    assert probe["argmax_eps"] == probe["epsilon"] == eps and probe["a_t"] == 0.7
    assert probe["attack"] == "input" and probe["relative_epsilon"] and probe["n_test"] == 4096
    assert probe["radius"] == pytest.approx(eps * probe["mu_norm"]) and probe["mu_norm"] == pytest.approx(1.5, abs=0.05)
    for name in ("standard", "robust"):  # Phi(s) and Phi(s (1 - eps)): the raw reference of Thm 1
        assert probe[name]["accuracy"] == pytest.approx(norm.cdf(1.5), abs=0.02)
        assert probe[name]["robust_accuracy"] == pytest.approx(norm.cdf(1.5 * (1 - eps)), abs=0.02)
    assert result["timings_s"]["robust_probe"] > 0 and "baselines" not in result


def test_relative_eps_probes_do_not_depend_on_the_units():
    """SynBench's score and its suggested probe are unit-free: z = 100 x gives the same
    eps, radius x 100 on the representation and the same accuracies."""
    config = synbench.Config(**SMALL, robust_probe=True, probe_attack="representation", probe_steps=200)
    plain = synbench.run(synbench.identity_representation((4,), batch_size=512), config).robust_probe
    big = synbench.run(synbench.function_representation("big", lambda x: 100.0 * x, (4,), batch_size=512),
                       config).robust_probe
    assert big["epsilon"] == plain["epsilon"]
    assert big["radius"] == pytest.approx(100 * plain["radius"], rel=1e-4)
    for name in ("standard", "robust"):
        assert big[name]["robust_accuracy"] == pytest.approx(plain[name]["robust_accuracy"], abs=0.02)


def test_downstream_task_is_held_out_and_raw():
    rep = synbench.identity_representation((4,), batch_size=64, offset=0.5, normalize=lambda x: 2 * x)
    config = synbench.Config(n=64, batch_size=64, probe_scale=1.0)
    x_train, y_train, x_test, y_test = synbench.downstream_task(rep, config)
    assert x_train.shape == x_test.shape == (64, 4) and set(np.unique(y_train)) <= {-1, 1}
    scored, _ = synbench.represent(rep, config, 1.0, "train")  # normalised: 2 x
    assert not np.allclose(2 * x_train, scored)  # another seed: never a scored sample
    assert abs(float(x_train.mean()) - 0.5) < 0.2  # raw inputs around the offset, before normalisation
    encoder, params = rep.input_encoder()
    np.testing.assert_allclose(np.asarray(encoder(params, jnp.asarray(x_train))), 2 * x_train, rtol=1e-6)


def test_representations_without_gradients_need_the_representation_attack():
    base = synbench.identity_representation((4,), batch_size=512)
    opaque = synbench.Representation("opaque", (4,), base.fn)  # no encoder: e.g. a language model
    config = synbench.Config(**SMALL, robust_probe=True, probe_steps=50)
    with pytest.raises(LmprobeError, match="`probe_attack=representation`"):
        synbench.run(opaque, config)
    got = synbench.run(opaque, synbench.Config(**SMALL, robust_probe=True, probe_steps=50,
                                               probe_attack="representation")).robust_probe
    assert got["attack"] == "representation" and 0.5 < got["standard"]["accuracy"] < 1


def test_probe_and_baseline_settings_fail_early():
    for bad, match in (({"probe_a_t": 0.8}, "probe_a_t=0.8"), ({"probe_attack": "pixels"}, "attack='pixels'"),
                       ({"probe_n": 2}, "probe_n=2")):
        with pytest.raises(LmprobeError, match=match):
            synbench.Config(**SMALL, robust_probe=True, **bad).check()
    with pytest.raises(LmprobeError, match="baseline_scale=1.5"):
        synbench.Config(**SMALL, baselines=True, baseline_scale=1.5).check()
    synbench.Config(**SMALL, probe_a_t=0.8, baseline_scale=1.5).check()  # off: not checked


def test_baselines_on_the_cached_representations(tmp_path, monkeypatch):
    config = synbench.Config(**SMALL, baselines=True, baseline_scale=2.0, baseline_steps=25)
    rep = synbench.identity_representation((4,), batch_size=512)
    seen, curves = [], loss_data.loss_data_curves

    def spy(z, y, **kwargs):  # the one expensive call, recorded instead of repeated
        seen.append((z, y, kwargs, curves(z, y, **kwargs)))
        return seen[-1][-1]

    monkeypatch.setattr(loss_data, "loss_data_curves", spy)
    first = synbench.run(rep, config, cache_dir=str(tmp_path)).to_dict()["baselines"]
    (z_seen, y_seen, kwargs, curve), = seen  # one curve, on the train split of the baseline scale
    z, y = synbench.represent(rep, config, 2.0, "train")
    np.testing.assert_array_equal(z_seen, z)
    np.testing.assert_array_equal(y_seen, y)
    assert kwargs["steps"] == 25 and kwargs["seed"] == config.seed
    assert first == pytest.approx({"scale": 2.0, "n": 512, "steps": 25, **loss_data.loss_data_metrics(curve)})
    assert first["max_n"] == 460 and (first["esc"] is None or first["esc"] <= 460)  # floor(0.9 n), Table 14
    assert 0 < first["val_loss"] < 1.5 and first["mdl"] > first["sdl"] >= 0
    monkeypatch.setattr(loss_data, "loss_data_curves", lambda *a, **k: pytest.fail("not cached"))
    assert synbench.run(rep, config, cache_dir=str(tmp_path)).baselines == first


def test_front_end_robust_probe_and_baselines(tmp_path, capsys):
    out = tmp_path / "run"
    front_end.main(["--model", "identity", "--input_shape", "4", "--n", "256", "--batch_size", "256",
                    "--scales", "0.5,1,2,3,5", "--a_t", "0.7", "--eps", "0,0.2", "--robust_probe", "--probe_steps",
                    "50", "--baselines", "--baseline_scale", "2", "--baseline_steps", "10", "--output_dir", str(out)])
    result = json.loads((out / "results.json").read_text())
    assert result["robust_probe"]["epsilon"] == result["argmax_eps"]["0.7"]
    assert set(result["robust_probe"]["robust"]) == {"accuracy", "robust_accuracy"}
    assert result["baselines"]["scale"] == 2.0 and result["config"]["baselines"] is True
    printed = capsys.readouterr().out
    assert "robust linear probing" in printed and "loss-data baselines" in printed and "standard (eps=0)" in printed
