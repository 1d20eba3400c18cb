"""SCoPE's greedy search with the Typo-Invariance capability: adjacent swaps, several words (up to
DEFAULT_TYPO_MAX_WORDS), each further word lowering the objective. A deterministic toy model keeps
this fast (the BERT end-to-end tests are in tests/methods/test_scope.py)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from lmprobe.errors import LmprobeError
from lmprobe.methods.scope import capabilities
from lmprobe.methods.scope.search import search
from lmprobe.perturb.constraints import Words
from lmprobe.perturb.typo import adjacent_swaps, any_swaps

TEXTS = ["a fast, funny, highly enjoyable movie.", "my reaction in a word: disappointment.",
         "too slow, too long, and too little happens.",
         "allows us to hope that nolan is poised to embark a major career as a commercial yet inventive filmmaker.",
         "the of and"]


class ToyModel:
    """Two classes; the logit is a fixed position-and-character weighting of the text, so a
    typo moves the output by a small signed amount and typos can partly cancel."""

    name = "toy"
    unknown_token = "[UNK]"

    def log_probs(self, texts):
        scores = [1.0 + 0.05 * sum(np.sin(1.3 * ord(c) + 0.7 * i) for i, c in enumerate(t)) for t in texts]
        logits = jnp.asarray([[s, -s] for s in scores], jnp.float32)
        return jax.nn.log_softmax(logits, -1)


def _changed(p):
    old, new = Words.of(p.text).words, Words.of(p.perturbed).words
    assert len(old) == len(new)
    return {i: (a, b) for i, (a, b) in enumerate(zip(old, new)) if a != b}


def test_typo_capability_defaults():
    typo = capabilities.get("typo")
    assert typo.max_words == capabilities.DEFAULT_TYPO_MAX_WORDS == 3
    assert capabilities.get("synonym").max_words == capabilities.get("fairness").max_words == 1
    assert capabilities.get("typo", max_words=1).max_words == 1
    rng = np.random.default_rng(0)
    assert set(typo.transform("disappointment", rng)) <= set(adjacent_swaps("disappointment"))
    wide = capabilities.get("typo-any")
    assert wide.name == "typo-any" and set(wide.transform("disappointment", rng)) <= set(any_swaps("disappointment"))
    assert typo.constraints.stopwords == "nltk"
    with pytest.raises(LmprobeError, match="swap 'neighbour'"):
        capabilities.get("typo", swap="neighbour")


def test_greedy_typo_search_changes_up_to_three_words_each_lowering_the_objective():
    model, typo = ToyModel(), capabilities.get("typo")
    result = search(model, TEXTS, typo, trials=2, seed=0)
    assert result.skipped.get("no eligible word") == 1 and result.n_invariant == 4
    base = np.exp(np.asarray(model.log_probs(TEXTS)))
    sizes = []
    for p in result.perturbations:
        changed = _changed(p)
        assert set(changed) == set(p.words) and 1 <= len(changed) <= 3
        sizes.append(len(changed))
        words = Words.of(p.text)
        for i, (a, b) in changed.items():
            assert i in typo.constraints.eligible(words) and b in adjacent_swaps(a)
        out = np.exp(np.asarray(model.log_probs([p.perturbed])))[0]
        assert out.argmax() == base[p.index].argmax()
        assert abs(np.abs(out - base[p.index]).sum() - p.objective) < 1e-5
        # every prefix of the accepted words had a higher objective: each further word lowered L
        losses = []
        for k in range(1, len(p.words) + 1):
            text = words.replace({j: Words.of(p.perturbed).words[j] for j in p.words[:k]})
            losses.append(np.abs(np.exp(np.asarray(model.log_probs([text])))[0] - base[p.index]).sum())
        assert all(x > y for x, y in zip(losses, losses[1:]))
    assert max(sizes) > 1  # several words typo'd for some text (Table 3: up to three)
    single = search(model, TEXTS, capabilities.get("typo", max_words=1), trials=2, seed=0)
    assert all(len(_changed(p)) == 1 for p in single.perturbations)
