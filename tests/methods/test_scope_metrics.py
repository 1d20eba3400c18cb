"""Hard-/Soft-SCoPE and agreements (Rawal & Toneva, arXiv:2311.04166v1 Sec. 3.3, App. E Table 1)."""

import jax.numpy as jnp
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from lmprobe.methods.scope import metrics

A, B, C = 0, 1, 2
# App. E Table 1: (m1(x), m1(x'), m2(x), m2(x')) -> IID agreement, OOD agreement, Hard-SCoPE
TABLE_1 = [((A, A, B, B), 0, 0, 1), ((A, A, B, A), 0, 1, 0), ((A, A, A, B), 1, 0, 0),
           ((A, A, A, A), 1, 1, 1), ((A, A, B, B), 0, 0, 1), ((A, A, B, C), 0, 0, 0)]


def _log_onehot(labels, n=3, p=0.9):
    out = np.full((len(labels), n), (1 - p) / (n - 1))
    out[np.arange(len(labels)), labels] = p
    return jnp.log(jnp.asarray(out, jnp.float32))


def test_truth_table_of_appendix_e():
    for (r_x, r_xp, t_x, t_xp), iid, ood, hard in TABLE_1:
        stats = metrics.pair_statistics(*(_log_onehot([v]) for v in (r_x, r_xp, t_x, t_xp)))
        s = metrics.summarize(stats, [0], n_bootstrap=0)
        assert (s["iid_agreement"], s["ood_agreement"], s["hard_scope"]) == (iid, ood, hard)


@settings(max_examples=50, deadline=None)
@given(st.integers(0, 2**31), st.integers(1, 30), st.sampled_from([2, 3, 5]))
def test_soft_is_at_most_hard_and_self_is_one(seed, n, k):
    rng = np.random.default_rng(seed)
    lp = [jnp.asarray(np.log(rng.dirichlet(np.ones(k), n)), jnp.float32) for _ in range(4)]
    s = metrics.summarize(metrics.pair_statistics(*lp), np.arange(n), n_bootstrap=0)
    if not np.isnan(s["hard_scope"]):
        assert 0 <= s["soft_scope"] <= s["hard_scope"] + 1e-12
    self_stats = metrics.pair_statistics(lp[0], lp[1], lp[0], lp[1])
    labels = np.asarray(self_stats["ref_x"])
    own = metrics.summarize(self_stats, np.arange(n), labels, n_bootstrap=20)
    for m in ("iid_agreement", "ood_agreement", "soft_scope"):
        assert own[m] == 1.0 or (m == "soft_scope" and np.isnan(own["hard_scope"]))
    assert own["iid_accuracy_gap"] == 0.0


def test_decay_and_intervals():
    assert metrics.decay([0.0, 0.05, 0.525, 1.0, 3.0]).tolist() == [1.0, 1.0, 0.5, 0.0, 0.0]
    rng = np.random.default_rng(0)
    lp = [jnp.asarray(np.log(rng.dirichlet(np.ones(2), 80)), jnp.float32) for _ in range(4)]
    s = metrics.summarize(metrics.pair_statistics(*lp), np.arange(80), n_bootstrap=200)
    for m in ("ood_agreement", "hard_scope", "soft_scope"):
        low, high = s["intervals"][m]
        assert low <= s[m] <= high and high - low < 0.5


def test_cosine_agreement_for_language_models():
    lp = jnp.log(jnp.asarray([[0.5, 0.5, 0.0], [0.2, 0.3, 0.5]], jnp.float32) + 1e-9)
    stats = metrics.pair_statistics(lp, lp, lp, lp[::-1], agreement="cosine")
    assert np.allclose(stats["iid_agree"], 1.0, atol=1e-5) and stats["ood_agree"][0] < 0.9


# two trials of four base examples: (m1(x), m1(x'), m2(x), m2(x'))
TRIALS = [[(A, A, A, A), (A, B, A, A), (A, B, A, B), (B, C, B, B)],  # OOD 2/4; Hard over 1 pair: 1/1
          [(A, A, A, B), (A, A, A, A), (B, B, B, C), (A, A, B, B)]]  # OOD 1/4; Hard over 4 pairs: 2/4


def test_headline_is_mean_and_standard_error_over_trials():
    rows = [r for trial in TRIALS for r in trial]
    stats = metrics.pair_statistics(*(_log_onehot([r[k] for r in rows]) for k in range(4)))
    s = metrics.summarize(stats, [0, 1, 2, 3] * 2, trial_of_pair=[0] * 4 + [1] * 4, n_bootstrap=200)
    assert s["per_trial"]["ood_agreement"] == [0.5, 0.25] and s["per_trial"]["hard_scope"] == [1.0, 0.5]
    # mean of the trials, SE = std(ddof=1) / sqrt(2) = |a - b| / 2
    assert s["ood_agreement"] == 0.375 and np.isclose(s["std_error"]["ood_agreement"], 0.125)
    assert s["hard_scope"] == 0.75 and np.isclose(s["std_error"]["hard_scope"], 0.25)
    assert s["soft_scope"] == 0.75  # one-hot outputs: dm1 = dm2 = 0 where both are invariant
    assert s["pooled"]["hard_scope"] == 0.6 and s["pooled"]["ood_agreement"] == 0.375  # 3/5 pairs pooled
    # OOD agreement counts every pair; Hard-/Soft-SCoPE only the 5 the reference is invariant on
    assert s["counts"]["ood_agreement"] == {"pairs": 8, "examples": 4}
    assert s["counts"]["hard_scope"] == s["counts"]["soft_scope"] == {"pairs": 5, "examples": 4}
    assert s["trials"] == 2 and s["pairs"] == 8
    for m in ("ood_agreement", "hard_scope"):
        low, high = s["intervals"][m]
        assert low <= s[m] <= high


def test_mean_and_std_error_by_hand():
    mean, se = metrics.mean_and_std_error([0.25, 0.5, 1.0])
    assert np.isclose(mean, 7 / 12) and np.isclose(se, np.sqrt(((1 / 3) ** 2 + (1 / 12) ** 2 + (5 / 12) ** 2) / 2 / 3))
    assert np.isclose(se, 0.220479, atol=1e-6)
    assert np.allclose(metrics.mean_and_std_error([0.4, np.nan, 0.6]), (0.5, 0.1))  # an undefined trial is left out
    mean, se = metrics.mean_and_std_error([0.7])
    assert mean == 0.7 and np.isnan(se)
    assert all(np.isnan(metrics.mean_and_std_error([np.nan])))
