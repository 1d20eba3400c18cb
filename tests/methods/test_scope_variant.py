"""App. E.1: an example whose only candidates flip the reference's argmax keeps its lowest-L x',
flagged invariant=False; OOD agreement counts it (Sec. 3.3.2), Hard-/Soft-SCoPE do not (Eq. 2/3).
A deterministic toy reference keeps this fast."""

import jax
import jax.numpy as jnp
import numpy as np

from lmprobe.methods import scope as scope_method
from lmprobe.methods.scope import capabilities
from lmprobe.methods.scope.search import Goal, initial_states, score, search

FRAGILE = "a wonderful, memorable movie."  # every edit flips the reference
ROBUST = "a dreadful, tiresome picture."  # no edit flips it
TEXTS = [FRAGILE, ROBUST, "the of and"]


class Toy:
    """P(class 0): 0.9 on FRAGILE, 0.3 + jitter on its edits, 0.8 + jitter on everything else."""

    name, unknown_token, label_names = "toy", "[UNK]", ("negative", "positive")

    def log_probs(self, texts):
        p = []
        for t in texts:
            jitter = 0.05 * np.sin(sum(ord(c) * (i + 1) for i, c in enumerate(t)))
            p.append(0.9 if t == FRAGILE else (0.3 if t.startswith("a w") else 0.8) + jitter)
        p = np.asarray(p, np.float32)
        return jnp.log(jnp.asarray(np.stack([p, 1 - p], -1)))


class Constant:
    """Always class 0: invariant everywhere, agrees with the reference exactly where it says 0."""

    name, unknown_token, label_names = "constant", "[UNK]", ("negative", "positive")

    def log_probs(self, texts):
        return jax.nn.log_softmax(jnp.tile(jnp.asarray([[1.0, 0.0]]), (len(texts), 1)), -1)


def test_an_example_with_only_argmax_variant_candidates_keeps_its_lowest_objective_edit():
    model, typo = Toy(), capabilities.get("typo", max_words=1)
    result = search(model, TEXTS, typo, trials=3, seed=0)
    assert result.skipped == {"no eligible word": 1}  # not "no invariant candidate" any more
    assert result.n_perturbed == 2 and result.n_invariant == 1 and len(result.perturbations) == 6
    base = model.log_probs(TEXTS)
    for p in result.perturbations:
        loss, same = score(model, base, [p.perturbed], [p.index], Goal())
        assert p.invariant == (p.index == 1) == bool(same[0]) and abs(loss[0] - p.objective) < 1e-5
    assert len({p.perturbed for p in result.perturbations if p.index == 0}) == 3  # distinct trials
    # trial 0's fallback is the lowest-L one-word edit of all the walk's candidates (Eq. 1)
    state = next(s for s in initial_states(TEXTS, typo, 0, 0, {}) if s.index == 0)
    options = [state.original.replace({j: w}) for j, ws in state.candidates.items() for w in ws]
    losses, _ = score(model, base, options, [0] * len(options), Goal())
    first = next(p for p in result.perturbations if p.index == 0 and p.trial == 0)
    assert abs(first.objective - losses.min()) < 1e-6 and first.perturbed == options[int(np.argmin(losses))]


def test_without_argmax_requirement_every_edit_succeeds_and_is_flagged():
    result = search(Toy(), TEXTS, capabilities.get("typo", max_words=1), goal=Goal(require_argmax=False), trials=1)
    assert {p.index: p.invariant for p in result.perturbations} == {0: False, 1: True}


def test_ood_agreement_counts_the_variant_example_and_hard_scope_does_not():
    result = scope_method.run(Toy(), {"constant": Constant()}, TEXTS, None,
                           scope_method.Config(capability="typo", max_words=1, trials=3, n_bootstrap=20))
    out, samples = result.to_dict(), list(result.samples())
    row = out["targets"]["constant"]
    # FRAGILE: m1 says 0 on x and 1 on x' (variant), the target 0: OOD disagreement, outside Hard-SCoPE.
    # ROBUST: both say 0 on x and x': OOD agreement, target invariant. Before: FRAGILE was dropped (OOD 1.0).
    assert row["ood_agreement"] == 0.5 and row["std_error"]["ood_agreement"] == 0.0
    assert row["hard_scope"] == 1.0 and row["per_trial"]["ood_agreement"] == [0.5, 0.5, 0.5]
    assert row["counts"]["ood_agreement"] == {"pairs": 6, "examples": 2}
    assert row["counts"]["hard_scope"] == row["counts"]["soft_scope"] == {"pairs": 3, "examples": 1}
    assert row["counts"]["iid_agreement"] == {"pairs": 3, "examples": 3} and row["iid_agreement"] == 1.0
    assert row["std_error"]["iid_agreement"] == 0.0 and row["trials"] == 3
    assert (out["n_examples"], out["n_perturbed"], out["n_invariant"], out["n_pairs"], out["n_invariant_pairs"]) \
        == (3, 2, 1, 6, 3)
    assert sorted((s["index"], s["invariant"]) for s in samples) == [(0, False)] * 3 + [(1, True)] * 3
