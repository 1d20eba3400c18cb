"""Goal function and batched greedy search: x' = C(x; m) = argmin_{x' != x} L(m(x), m(x'))
(Rawal & Toneva, arXiv:2311.04166v1 Eq. 1), subject to argmax-invariance (Sec. 3.1, App. E.1) and to the capability's
constraints.

Batched: every candidate of every example of a step is collected and scored by one
``model.log_probs`` call (the engine buckets it into a few jitted programs), and L is reduced
on device (kernels.divergence); the reference instead calls the model once per candidate,
padded to 512 tokens.

Per example and trial:
 1. candidates = the transformation at each eligible word of x (plus, for the 'pwws' order, x
    with each word replaced by the unknown token); all scored in one call.
 2. word order: 'pwws', probability weighted word saliency (Ren et al. 2019) with the goal
    score g(x') = -L(m(x), m(x')): softmax over words of g(x with the word unknown), times the
    word's best g gain; 'best': the words by their best candidate's L.
 3. greedy: walk the words in order; at each, take the lowest-L candidate that keeps m's
    argmax and differs from x and from the earlier trials' results. The first such candidate
    is accepted; with max_words > 1 the walk continues (one batched call per step for all
    examples still going) while each further word lowers L.
 4. no argmax-invariant candidate at any word: x' is the lowest-L candidate of the walk (Eq. 1's
    minimiser over the one-word edits, distinct from x and the earlier trials), kept with
    ``invariant=False``. App. E.1: "it is possible that the search method is unable to find
    candidates that fulfill this criterion ... there are a few argmax-variant samples as well.
    Note, the argmax-variant samples would be ignored while evaluating measures such as
    Hard-SCoPE and Soft-SCoPE". So every eligible example gets an x' per trial: OOD agreement
    (Sec. 3.3.2, an expectation over all x in X) counts it, and Hard-/Soft-SCoPE (Eq. 2/3,
    conditioned on y_m1(x) = y_m1(x')) leave it out (metrics.py).
Each trial draws its own random candidates (typos) from np.random.default_rng([seed, i, t]),
so results do not depend on batching.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import ClassVar

import jax
import jax.numpy as jnp
import numpy as np

from lmprobe import kernels
from lmprobe.errors import LmprobeError
from lmprobe.methods.scope.capabilities import Capability
from lmprobe.perturb.constraints import Words, is_single_word

OBJECTIVES = ("l1", "kl")


@dataclasses.dataclass(frozen=True)
class Goal:
    """objective L: 'l1' = ||m(x) - m(x')||_1 (Eq. 1, the default) or 'kl' = KL(m(x) || m(x'))
    (App. I); require_argmax: only argmax-invariant candidates succeed (Sec. 3.1), and an example
    with none keeps its lowest-L candidate flagged ``invariant=False`` (App. E.1); False: every
    candidate succeeds (the greedy walk then only follows L)."""

    objective: str = "l1"
    require_argmax: bool = True

    def check(self) -> None:
        if self.objective not in OBJECTIVES:
            raise LmprobeError(f"objective '{self.objective}' is not one of {OBJECTIVES}")


@dataclasses.dataclass(frozen=True)
class Perturbation:
    index: int  # base example
    trial: int
    text: str
    perturbed: str
    objective: float  # L(m(x), m(x'))
    words: tuple[int, ...]  # modified word positions
    invariant: bool = True  # y_m(x') = y_m(x); False: argmax-variant, kept for OOD agreement (App. E.1)


@dataclasses.dataclass
class SearchResult:
    perturbations: list[Perturbation]
    n_examples: int
    skipped: dict[str, int]  # reason -> examples
    model_calls: int  # batched log_probs calls
    candidates_scored: int
    # its JSON (dataclasses.asdict; lmprobe.store.json_problem)
    SCHEMA: ClassVar[dict] = {"perturbations": [{"index": int, "trial": int, "text": str, "perturbed": str,
                                                 "objective": float, "words": [int], "invariant": bool}],
                              "n_examples": int, "skipped": {str: int}, "model_calls": int, "candidates_scored": int}

    @property
    def n_invariant(self) -> int:
        """Examples with at least one argmax-invariant perturbation."""
        return len({p.index for p in self.perturbations if p.invariant})

    @property
    def n_perturbed(self) -> int:
        """Examples with at least one perturbation, argmax-invariant or not."""
        return len({p.index for p in self.perturbations})


@jax.jit
def _objectives(base, candidates, index):
    b = base[index]
    same = jnp.argmax(b, -1) == jnp.argmax(candidates, -1)
    return kernels.l1_distance(b, candidates), kernels.kl_divergence(b, candidates), same


def score(model, base_log_probs, texts: Sequence[str], base_index: Sequence[int], goal: Goal,
          chunk_size: int = 2048) -> tuple[np.ndarray, np.ndarray]:
    """(L, argmax kept) of each text against its base example's m(x), reduced on device."""
    losses, same = [], []
    for start in range(0, len(texts), chunk_size):
        out = model.log_probs(texts[start:start + chunk_size])
        index = jnp.asarray(np.asarray(base_index[start:start + chunk_size], np.int32))
        l1, kl, keep = _objectives(base_log_probs, out, index)
        losses.append(np.asarray(l1 if goal.objective == "l1" else kl))
        same.append(np.asarray(keep))
    if not losses:
        return np.zeros(0), np.zeros(0, bool)
    return np.concatenate(losses), np.concatenate(same)


@dataclasses.dataclass
class _State:
    index: int
    original: Words
    current: Words
    candidates: dict[int, list[str]]  # word position -> replacement words
    order: list[int] = dataclasses.field(default_factory=list)
    position: int = 0
    loss: float | None = None
    modified: tuple[int, ...] = ()
    invariant: bool = True  # of current
    fallback: tuple[float, str, int] | None = None  # lowest-L argmax-variant candidate (L, text, word)
    done: bool = False


class _Cache:
    """Scores of texts per example; uncached texts of a step are scored in one call."""

    def __init__(self, model, base_log_probs, goal, chunk_size):
        self.model, self.base, self.goal, self.chunk_size = model, base_log_probs, goal, chunk_size
        self.table: dict[tuple[int, str], tuple[float, bool]] = {}
        self.calls = self.scored = 0

    def fill(self, requests: list[tuple[int, str]]) -> None:
        todo = list(dict.fromkeys(r for r in requests if r not in self.table))
        if not todo:
            return
        loss, same = score(self.model, self.base, [t for _, t in todo], [i for i, _ in todo], self.goal,
                           self.chunk_size)
        self.calls += 1
        self.scored += len(todo)
        self.table.update({r: (float(l), bool(s)) for r, l, s in zip(todo, loss, same)})


def search(model, texts: Sequence[str], capability: Capability, *, goal: Goal = Goal(), trials: int = 3,
           seed: int = 0, chunk_size: int = 2048, base_log_probs=None,
           progress: Callable = lambda it, **_: it) -> SearchResult:
    """``trials`` distinct perturbations of each text with an eligible word, argmax-invariant ones
    where the search finds one, flagged otherwise (module docstring)."""
    capability.check()
    goal.check()
    if trials < 1:
        raise LmprobeError(f"trials={trials}: use at least 1")
    texts = list(texts)
    base = model.log_probs(texts) if base_log_probs is None else base_log_probs
    cache = _Cache(model, base, goal, chunk_size)
    found: list[Perturbation] = []
    seen = [{t} for t in texts]
    skipped: dict[str, int] = {}
    for trial in progress(range(trials), desc=f"{capability.name} search"):
        states = initial_states(texts, capability, seed, trial, skipped if trial == 0 else {})
        requests = [(s.index, s.original.replace({j: w})) for s in states
                    for j, ws in s.candidates.items() for w in ws]
        if capability.order == "pwws":
            requests += [(s.index, s.original.replace({j: model.unknown_token})) for s in states for j in s.candidates]
        cache.fill(requests)
        for s in states:
            s.order = _order(s, capability, model.unknown_token, cache)
        _greedy(states, capability, goal, cache, seen)
        for s in states:
            if s.loss is not None:
                text = s.current.text
                seen[s.index].add(text)
                found.append(Perturbation(s.index, trial, texts[s.index], text, s.loss, s.modified, s.invariant))
    n_found = len({p.index for p in found})
    eligible = len(texts) - sum(skipped.values())
    if eligible - n_found:
        skipped["no candidate"] = eligible - n_found
    found.sort(key=lambda p: (p.index, p.trial))
    return SearchResult(found, len(texts), skipped, cache.calls + (base_log_probs is None), cache.scored)


def initial_states(texts, capability, seed, trial, skipped) -> list[_State]:
    """The search's starting state of each text: its words and, per eligible position, the candidate
    replacements drawn for this ``trial``; texts with no eligible word are counted in ``skipped``."""
    states = []
    for i, text in enumerate(texts):
        words = Words.of(text)
        rng = np.random.default_rng([seed, i, trial])
        candidates = {}
        for j in capability.constraints.eligible(words, (), capability.applies):
            word = words.words[j]
            options = [w for w in dict.fromkeys(capability.transform(word, rng)) if w != word and is_single_word(w)]
            if options:
                candidates[j] = options
        if candidates:
            states.append(_State(i, words, words, candidates))
        else:
            skipped["no eligible word"] = skipped.get("no eligible word", 0) + 1
    return states


def _order(state: _State, capability: Capability, unknown: str, cache: _Cache) -> list[int]:
    positions = sorted(state.candidates)
    best = np.asarray([min(cache.table[state.index, state.original.replace({j: w})][0]
                           for w in state.candidates[j]) for j in positions])
    if capability.order == "best":
        return [positions[k] for k in np.argsort(best, kind="stable")]
    saliency = -np.asarray([cache.table[state.index, state.original.replace({j: unknown})][0] for j in positions])
    weights = np.exp(saliency - saliency.max())
    weights /= weights.sum()
    gain = -best  # g(x'_best) - g(x), g = -L and L(m(x), m(x)) = 0
    return [positions[k] for k in np.argsort(-(weights * gain), kind="stable")]


def _proposals(state: _State) -> tuple[int, list[str]] | None:
    while state.position < len(state.order):
        j = state.order[state.position]
        state.position += 1
        if j not in state.modified:
            return j, [state.current.replace({j: w}) for w in state.candidates[j]]
    return None


def _greedy(states: list[_State], capability: Capability, goal: Goal, cache: _Cache, seen) -> None:
    active = list(states)
    while active:
        step = []
        for s in active:
            proposal = _proposals(s)
            if proposal is None:
                s.done = True
            else:
                step.append((s, *proposal))
        cache.fill([(s.index, t) for s, _, texts in step for t in texts])  # one call per step
        for s, j, texts in step:
            new = [(cache.table[s.index, t][0], t) for t in texts if t not in seen[s.index]]
            valid = [(loss, t) for loss, t in new if cache.table[s.index, t][1] or not goal.require_argmax]
            if s.loss is None and len(valid) < len(new):  # still one word from x: remember the best variant
                variant = min((loss, t, j) for loss, t in new if (loss, t) not in valid)
                s.fallback = variant if s.fallback is None else min(s.fallback, variant)
            if valid:
                loss, text = min(valid)
                if s.loss is None or loss < s.loss:
                    s.current, s.loss, s.modified = Words.of(text), loss, s.modified + (j,)
                    s.invariant = cache.table[s.index, text][1]
                    s.done = len(s.modified) >= capability.max_words
                    continue
            if s.loss is not None:
                s.done = True  # a further word did not lower L
        active = [s for s in active if not s.done]
    for s in states:
        if s.loss is None and s.fallback is not None:  # App. E.1: no invariant candidate anywhere
            loss, text, j = s.fallback
            s.current, s.loss, s.modified, s.invariant = Words.of(text), loss, (j,), False
