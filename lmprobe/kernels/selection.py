"""One greedy step of a perturbation search, for a whole batch (SCoPE 002 Sec. 3.1).

Each example has a padded list of candidate perturbations with an objective value (e.g. the
L1 distance between the reference model's outputs on x and x') and a validity mask (the
candidate meets the constraints and the goal function). The step keeps, per example, the
best valid candidate, or reports that there is none.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp


class Selection(NamedTuple):
    index: jax.Array  # [...] int32, position of the chosen candidate, -1 when none
    found: jax.Array  # [...] bool
    value: jax.Array  # [...] its objective; -inf (maximize) / +inf (minimize) when none


@functools.partial(jax.jit, static_argnames=("maximize",))
def select_best_candidate(
    objectives: jax.Array,
    valid: jax.Array,
    *,
    maximize: bool = True,
    baseline: jax.Array | None = None,
) -> Selection:
    """Best valid candidate per example: objectives, valid [..., C] -> Selection of shape [...].

    NaN objectives count as invalid. With ``baseline`` [...] a candidate must also beat it
    strictly (e.g. the current objective, so that a greedy search stops when nothing
    improves). Ties go to the lowest index. SCoPE minimises its objective: maximize=False.
    """
    objectives = jnp.asarray(objectives, jnp.float32)
    worst = -jnp.inf if maximize else jnp.inf
    ok = jnp.asarray(valid, bool) & ~jnp.isnan(objectives)
    if baseline is not None:
        baseline = jnp.asarray(baseline, jnp.float32)[..., None]
        ok &= objectives > baseline if maximize else objectives < baseline
    masked = jnp.where(ok, objectives, worst)
    value = jnp.max(masked, axis=-1) if maximize else jnp.min(masked, axis=-1)
    index = jnp.argmax(ok & (masked == value[..., None]), axis=-1)  # first valid best
    found = jnp.any(ok, axis=-1)
    return Selection(
        index=jnp.where(found, index, -1).astype(jnp.int32),
        found=found,
        value=jnp.where(found, value, worst),
    )
