"""The adversarial module (Liu et al., arXiv:2310.01448v2 Sec. 3.2): edits of the generated samples meant to fool
the target ("brigns", "wit": typos, "joyful": a synonym, Figure 1), as the PromptBench attacks
(Zhu et al. 2023) the paper points to do.

Greedy attacks (``greedy-typo``, ``greedy-synonym``) reuse SCoPE's batched greedy search
(lmprobe.methods.scope.search, through its public API only) with the objective "flip the
target's prediction": for a sample of label y that the target classifies correctly, the
adversarial class a is the target's most probable other class, the search's reference
distribution m(x) is the one-hot on a (``base_log_probs``), and the objective 'kl' is then
KL(onehot(a) || m(x')) = -ln p_target(a | x'), the cross-entropy towards a. The search is run
with ``require_argmax=False`` so that edits accumulate: words are visited by their best single
edit (typo capability: 'best' order) or by probability weighted word saliency (synonyms: 'pwws'),
and each further word is edited while it raises p(a), up to ``attack_strength`` words. (With
``require_argmax=True`` the search would accept only candidates whose argmax already is a,
i.e. flips by a single word.) A sample becomes the attacked text only when the target's
prediction on it is no longer y, as a successful attack; otherwise the sample is kept unedited,
as attack benchmarks count a failed attack (TextAttack's FailedAttackResult keeps the original).
Samples the target already gets wrong are not attacked. With two classes, a = the other class
and "flipped" = "argmax is a"; with more, the attack is targeted at a.

Random attacks (``random-typo``, ``random-synonym``; ``typo`` / ``synonym`` are older names) are
the earlier random noise: ``attack_strength`` random typo / synonym edits of every sample,
blind to the target.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from lmprobe.errors import LmprobeError
from lmprobe.methods.scope import capabilities
from lmprobe.methods.scope.search import Goal, search
from lmprobe.perturb.constraints import Constraints
from lmprobe.perturb.synonym import synonym_swap
from lmprobe.perturb.typo import typo

RANDOM = {"random-typo": typo, "random-synonym": synonym_swap}
GREEDY = {"greedy-typo": "typo", "greedy-synonym": "synonym"}  # attack -> SCoPE capability
ALIASES = {"typo": "random-typo", "synonym": "random-synonym"}  # names before the greedy attacks
ATTACKS = ("none", *GREEDY, *RANDOM)


def canonical(name: str) -> str:
    name = ALIASES.get(name, name)
    if name not in ATTACKS:
        raise LmprobeError(f"unknown attack '{name}': use one of {', '.join(ATTACKS)}")
    return name


def random_attack(text: str, name: str, strength: int, rng: np.random.Generator) -> str:
    """``strength`` successive random typo or synonym edits (SCoPE's perturbations); unchanged
    when no word is eligible or the attack is not a random one."""
    edit = RANDOM.get(canonical(name))
    for _ in range(strength if edit else 0):
        text = edit(text, rng, Constraints()) or text
    return text


@dataclasses.dataclass
class AttackResult:
    texts: list[str]  # the samples after the attack (unchanged where it failed or was not run)
    success: np.ndarray  # bool [N]: the target's prediction flipped from the label
    attacked: np.ndarray  # bool [N]: correctly classified before, so attacked
    words: list[tuple[int, ...]]  # edited word positions of successful attacks
    stats: dict  # counts for results.json


def greedy_attack(target, texts: Sequence[str], labels: Sequence[int], name: str, strength: int = 1, *,
                  seed: int = 0, progress: Callable = lambda it, **_: it) -> AttackResult:
    """Flip the target's predictions on ``texts`` (module docstring). ``target``: anything with
    ``log_probs(texts) -> [N, C]`` class log-probabilities and ``unknown_token`` (a SCoPE model)."""
    name = canonical(name)
    if name not in GREEDY:
        raise LmprobeError(f"'{name}' is not a greedy attack: use one of {', '.join(GREEDY)}")
    texts, labels = list(texts), np.asarray(labels, np.int64)
    n = len(texts)
    result = AttackResult(list(texts), np.zeros(n, bool), np.zeros(n, bool), [()] * n,
                          {"attack": name, "attacked": 0, "already_wrong": 0, "flipped": 0, "model_calls": 0,
                           "candidates_scored": 0, "skipped": {}})
    if not n:
        return result
    clean = np.asarray(target.log_probs(texts), np.float64)
    right = np.argmax(clean, axis=1) == labels
    result.stats["already_wrong"] = int((~right).sum())
    todo = np.flatnonzero(right)
    result.attacked[todo] = True
    result.stats["attacked"] = len(todo)
    if not len(todo):
        return result
    others = clean[todo].copy()
    others[np.arange(len(todo)), labels[todo]] = -np.inf
    adversarial = np.argmax(others, axis=1)
    # m(x) := onehot(a): the 'kl' objective is -ln p(a | x'), lowered by the search
    base = jnp.asarray(np.where(np.eye(clean.shape[1])[adversarial] > 0, 0.0, -np.inf), jnp.float32)
    capability = capabilities.get(GREEDY[name], max_words=strength)
    found = search(target, [texts[i] for i in todo], capability, goal=Goal(objective="kl", require_argmax=False),
                   trials=1, seed=seed, base_log_probs=base, progress=progress)
    result.stats["model_calls"] = found.model_calls + 1
    result.stats["candidates_scored"] = found.candidates_scored
    result.stats["skipped"] = dict(found.skipped)
    best = {}
    for p in found.perturbations:
        if p.index not in best or p.objective < best[p.index].objective:
            best[p.index] = p
    if best:
        keys = sorted(best)
        after = np.argmax(np.asarray(target.log_probs([best[k].perturbed for k in keys]), np.float64), axis=1)
        result.stats["model_calls"] += 1
        for k, prediction in zip(keys, after):
            i = todo[k]
            if prediction != labels[i]:
                result.texts[i], result.success[i], result.words[i] = best[k].perturbed, True, tuple(best[k].words)
    result.stats["flipped"] = int(result.success.sum())
    result.stats["success_rate"] = result.stats["flipped"] / max(len(todo), 1)
    return result


class TargetView:
    """The target as the attack sees it: ``log_probs(texts)`` = log-softmax of the class scores
    that MSTemp's predictions take the argmax of (accuracy.py), so a flip found here is a flip
    of the reported prediction."""

    def __init__(self, scores: Callable[[Sequence[str]], np.ndarray], unknown_token: str = "UNK"):
        self.scores, self.unknown_token = scores, unknown_token

    def log_probs(self, texts: Sequence[str]) -> jax.Array:
        return jax.nn.log_softmax(jnp.asarray(self.scores(list(texts)), jnp.float32), axis=-1)
