"""The model, its loss and its optimizer: lmprobe's Llama built from an HF config dict, the mean next-token
NLL of packed sequences (fp32 logits, the LM head over slices of positions: lmprobe.engine.steps), and
AdamW with linear warm-up and cosine decay (optax). Parameters are an ``nnx.State`` that the jitted
steps take and return; ``merge`` makes the module for checkpoints and scoring.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import optax
from flax import nnx

from lmprobe.engine.steps import token_logprobs
from lmprobe.models import family_for
from lmprobe.training.config import Config

NO_DECAY = ("weight", "bias")  # norm scales and biases; kernels and embeddings decay
FULL_LOGITS_BYTES = 2 ** 28  # fp32 logits of a whole batch up to this size in one go (faster); else by slices


@dataclasses.dataclass
class Model:
    graphdef: object
    params: nnx.State
    rest: nnx.State  # anything that is not a parameter (empty for Llama)

    def merge(self, params=None) -> nnx.Module:
        return nnx.merge(self.graphdef, self.params if params is None else params, self.rest)


def init_model(hf_config: dict, seed: int) -> Model:
    """A freshly initialised model of the family ``hf_config`` names (the family's own initialisers)."""
    family = family_for(hf_config, where="the training config")
    module = family.model(family.config_from_hf(hf_config), rngs=nnx.Rngs(params=seed))
    return Model(*nnx.split(module, nnx.Param, ...))


def schedule(config: Config) -> optax.Schedule:
    """Linear warm-up to ``learning_rate``, then cosine decay to ``final_lr_ratio`` of it at the last step."""
    warmup = min(config.warmup_steps, max(config.steps - 1, 0))
    return optax.warmup_cosine_decay_schedule(0.0, config.learning_rate, warmup, max(config.steps, warmup + 1),
                                              end_value=config.learning_rate * config.final_lr_ratio)


def optimizer(config: Config) -> optax.GradientTransformation:
    """AdamW (decoupled weight decay on kernels and embeddings only), after global-norm clipping."""
    decay = lambda params: jax.tree_util.tree_map_with_path(  # noqa: E731
        lambda path, _: str(getattr(path[-1], "key", path[-1])) not in NO_DECAY, params)
    adamw = optax.adamw(schedule(config), b1=0.9, b2=config.beta2, weight_decay=config.weight_decay, mask=decay)
    return optax.chain(optax.clip_by_global_norm(config.grad_clip), adamw) if config.grad_clip > 0 else adamw


def sequence_nll(module, ids, mask):
    """(summed NLL, predicted tokens) of rows ``ids`` [B, T] with ``mask`` [B, T] marking real tokens; the
    fp32 logits of the whole batch at once when small (FULL_LOGITS_BYTES), else the engine's sliced LM head."""
    if ids.size * module.config.vocab_size * 4 <= FULL_LOGITS_BYTES:
        logits = module(ids, mask).logits[:, :-1]
        lp = jnp.take_along_axis(jax.nn.log_softmax(logits), ids[:, 1:, None], axis=-1)[..., 0]
    else:
        lp = token_logprobs(module, ids, mask)[:, :-1]
    predicted = (mask[:, 1:] * mask[:, :-1]).astype(jnp.float32)
    return -(lp * predicted).sum(), predicted.sum()


def make_steps(model: Model, tx: optax.GradientTransformation):
    """(train_step(params, opt_state, ids) -> (params, opt_state, loss), eval_step(params, ids, mask) ->
    (summed NLL, tokens)), both jitted once for their fixed shapes."""

    def loss_fn(params, ids):
        total, count = sequence_nll(model.merge(params), ids, jnp.ones_like(ids))
        return total / count

    @jax.jit
    def train_step(params, opt_state, ids):
        loss, grads = jax.value_and_grad(loss_fn)(params, ids)
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    @jax.jit
    def eval_step(params, ids, mask):
        return sequence_nll(model.merge(params), ids, mask)

    return train_step, eval_step
