"""Hard-/Soft-SCoPE and agreements (../seeds/002 Sec. 3.3, App. E Table 1)."""

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
