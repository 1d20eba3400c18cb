"""Train a run from scratch, or resume it, writing a checkpoint at each step of the checkpoint schedule (``train``).

Layout of the run directory:

    checkpoints/<step>/   lmprobe.checkpoints.orbax_io: the model, its config.json and tokenizer, and the
                          metadata {"heldout_loss", "train_loss", "tokens", "seconds", "learning_rate"}
    train_state/<step>/   parameters and AdamW moments, the latest only (lmprobe.training.state): saved at
                          every checkpoint and every ``state_every`` steps
    tokenizer/            the run's tokenizer (trained once, reused on resume)
    train_log.jsonl       one row per optimizer step: {"step", "loss", "learning_rate"}
    run_config.json       the settings that shape the numbers; a resume with other settings is refused
    heldout.jsonl         the held-out documents ({"text"}), never trained on: ``Scorer.score`` of them
                          recomputes a checkpoint's held-out loss (summed NLL / predicted tokens)

``train_loss`` at a checkpoint is the mean loss of the training batches since the previous one (null at
step 0); ``seconds`` is wall time since the run began (resumes included). A rerun continues from the
saved train state: the batch of a step depends on (seed, step) only (``data.batch_indices``), so a
resumed run ends with the uninterrupted run's curve; checkpoints that exist are not written again.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
import time
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np

from lmprobe import log as logging_lib
from lmprobe.engine.runtime import enable_compilation_cache
from lmprobe.errors import LmprobeError
from lmprobe.store import Array, cache_key, cached, write_json, write_jsonl
from lmprobe.training import corpus, data
from lmprobe.training.config import Config, checkpoint_steps, hf_config, parameter_count
from lmprobe.training.model import init_model, make_steps, optimizer, schedule
from lmprobe.training.state import TrainState
from lmprobe.training.tokenizer import separator, tokenizer_for

log = logging_lib.get("lmprobe.training")
RESUME_MAY_CHANGE = ("state_every", "eval_batch_size")  # settings that do not change the numbers


@dataclasses.dataclass
class Result:
    curve: list[dict]  # per checkpoint: step, train_loss, heldout_loss, tokens, seconds, learning_rate
    checkpoints: dict[int, str]  # step -> its directory (Scorer.load takes it)
    hf_config: dict
    parameters: int
    data: dict  # documents per source, training / held-out documents, sequences and tokens, epochs
    resumed_from: int | None  # the step this process started at (None: from scratch)
    step_seconds: float | None  # mean wall time of an optimizer step in this process, compilation excluded
    step_cpu_seconds: float | None  # the same in CPU time of all threads (for extrapolating to a quiet machine)


@dataclasses.dataclass
class Prepared:
    tokenizer: object
    blocks: np.ndarray  # [N, seq_len] training sequences
    heldout: tuple[np.ndarray, np.ndarray]  # (ids, mask) of the held-out documents
    hf_config: dict
    info: dict


def _run_config(config: Config) -> dict:
    return json.loads(json.dumps({k: v for k, v in dataclasses.asdict(config).items() if k not in RESUME_MAY_CHANGE}))


def check_same_run(path: str, config: Config) -> None:
    """Record the run's settings in ``path``, or refuse settings that differ from the recorded ones."""
    wanted = _run_config(config)
    if not os.path.isfile(path):
        write_json(path, wanted)
        return
    with open(path, encoding="utf-8") as f:
        saved = json.load(f)
    changed = [f"{k}: {saved.get(k)!r} then, {v!r} now" for k, v in wanted.items() if saved.get(k) != v]
    if changed:
        raise LmprobeError(f"{os.path.dirname(path)} holds a run with other settings ({'; '.join(changed)}): "
                           "resume it with the same settings, or give another `output_dir`")


def prepare(config: Config, output_dir: str) -> Prepared:
    """The split, the tokenizer, the packed training sequences (cached) and the held-out rows."""
    split = corpus.load_split(config.corpus, heldout=config.heldout_documents, seed=config.heldout_seed,
                              max_documents=config.max_documents)
    write_jsonl(os.path.join(output_dir, "heldout.jsonl"), [{"text": t} for t in split.heldout])
    tokenizer = tokenizer_for(config.tokenizer, split.train, config.vocab_size, os.path.join(output_dir, "tokenizer"))
    eos = separator(tokenizer)
    with open(os.path.join(output_dir, "tokenizer", "tokenizer.json"), "rb") as f:
        key = cache_key(tokenizer=hashlib.sha256(f.read()).hexdigest(), run=_run_config(config), version=1)
    blocks = cached(os.path.join(output_dir, "cache", f"blocks-{key}.npy"),
                    lambda: data.pack(tokenizer, split.train, config.seq_len, eos),
                    expect=Array((None, config.seq_len), np.integer))
    heldout = data.heldout_rows(tokenizer, split.heldout, config.seq_len, config.eval_batch_size)
    info = {"documents": split.counts, "train_documents": len(split.train), "heldout_documents": len(split.heldout),
            "train_sequences": len(blocks), "train_tokens": int(blocks.size), "heldout_tokens": int(heldout[1].sum()),
            "epochs": config.steps * config.train_batch_size / len(blocks)}
    log.info(f"training text: {info['train_tokens']:,} tokens in {len(blocks):,} sequences of {config.seq_len} "
             f"({info['epochs']:.2f} epochs in {config.steps} steps); held out: {len(split.heldout)} documents, "
             f"{info['heldout_tokens']:,} tokens")
    return Prepared(tokenizer, blocks, heldout, hf_config(config, len(tokenizer), bos=tokenizer.bos_token_id, eos=eos),
                    info)


def evaluate(eval_step, params, rows: tuple[np.ndarray, np.ndarray], batch: int) -> float:
    """Mean next-token NLL (nats) over the held-out rows: summed NLL / predicted tokens."""
    ids, mask = rows
    total = count = 0.0
    for i in range(0, len(ids), batch):
        t, c = eval_step(params, jnp.asarray(ids[i:i + batch]), jnp.asarray(mask[i:i + batch]))
        total, count = total + float(t), count + float(c)
    return total / max(count, 1.0)


def read_log(path: str, start: int) -> list[dict]:
    """The step rows before ``start``, written back without the rest (a resumed run redoes those steps)."""
    rows = []
    if os.path.isfile(path):
        with open(path, encoding="utf-8") as f:
            for line in f:
                try:
                    row = json.loads(line)
                except ValueError:  # a line torn by a kill
                    break
                if row["step"] >= start:
                    break
                rows.append(row)
    if len(rows) != start:
        raise LmprobeError(f"{path} has {len(rows)} step rows, but the train state is at step {start}: the run "
                           "directory is damaged; start again in an empty `output_dir`")
    write_jsonl(path, rows)
    return rows


def train(config: Config, output_dir: str, *, progress: Callable = lambda it, **_: it) -> Result:
    """Train (or resume) the run ``config`` describes in ``output_dir`` (module docstring); ``progress``
    (tqdm-like) wraps the steps."""
    from lmprobe.checkpoints import orbax_io

    if jax.process_count() > 1:
        raise LmprobeError("training runs in one process: start it without jax.distributed")
    enable_compilation_cache()
    os.makedirs(output_dir, exist_ok=True)
    check_same_run(os.path.join(output_dir, "run_config.json"), config)
    prep = prepare(config, output_dir)
    model, tx, lr = init_model(prep.hf_config, config.seed), optimizer(config), schedule(config)
    params, opt_state = model.params, tx.init(model.params)
    train_step, eval_step = make_steps(model, tx)
    state = TrainState(os.path.join(output_dir, "train_state"))
    start, elapsed = state.latest(), 0.0
    if start:
        params, opt_state, elapsed = state.restore(start, params, opt_state)
        log.info(f"resuming at step {start} of {config.steps} from {state.directory}")
    log_path = os.path.join(output_dir, "train_log.jsonl")
    rows = read_log(log_path, start)
    saved = os.path.join(output_dir, "checkpoints")
    curve = {s: orbax_io.find(os.path.join(saved, str(s))).meta["metadata"] for s in orbax_io.steps(saved)}
    planned = checkpoint_steps(config)
    parameters = parameter_count(config, len(prep.tokenizer))
    log.info(f"model: {parameters:,} parameters ({config.num_layers} layers, width {config.hidden_size}, "
             f"vocabulary {len(prep.tokenizer):,}); checkpoints at steps {', '.join(map(str, planned))}")
    began, times = time.perf_counter() - elapsed, []

    def checkpoint(step: int) -> None:
        if step in curve:
            return
        previous = max((s for s in planned if s < step), default=None)
        losses = [r["loss"] for r in rows[previous:step]] if previous is not None else []
        meta = {"heldout_loss": evaluate(eval_step, params, prep.heldout, config.eval_batch_size),
                "train_loss": float(np.mean(losses)) if losses else None,
                "tokens": step * config.train_batch_size * config.seq_len, "seconds": time.perf_counter() - began,
                "learning_rate": float(lr(step))}
        orbax_io.save(saved, step, model.merge(params), hf_config=prep.hf_config, tokenizer=prep.tokenizer,
                      metadata=meta)
        curve[step] = meta
        shown = "-" if meta["train_loss"] is None else f"{meta['train_loss']:.4f}"
        log.info(f"step {step}: train loss {shown}, held-out loss {meta['heldout_loss']:.4f} "
                 f"({math.exp(meta['heldout_loss']):.1f} perplexity), {meta['tokens']:,} tokens; saved")

    try:
        with open(log_path, "a", encoding="utf-8") as log_file:
            if start in planned:
                checkpoint(start)
            for step in progress(range(start, config.steps), desc="training", total=config.steps - start):
                ids = prep.blocks[data.batch_indices(len(prep.blocks), config.train_batch_size, step, config.seed)]
                wall, cpu = time.perf_counter(), time.process_time()
                params, opt_state, loss = train_step(params, opt_state, jnp.asarray(ids))
                loss = float(loss)
                times.append((time.perf_counter() - wall, time.process_time() - cpu))
                if not math.isfinite(loss):
                    raise LmprobeError(f"the training loss is {loss} at step {step}: lower `learning_rate` "
                                       f"({config.learning_rate}) or raise `warmup_steps` ({config.warmup_steps})")
                rows.append({"step": step, "loss": loss, "learning_rate": float(lr(step))})
                log_file.write(json.dumps(rows[-1]) + "\n")
                log_file.flush()
                if step + 1 in planned:
                    checkpoint(step + 1)
                if step + 1 in planned or (step + 1) % config.state_every == 0:
                    state.save(step + 1, params, opt_state, time.perf_counter() - began)
    finally:
        state.close()
    timed = np.asarray(times[1:]).reshape(-1, 2)  # the first step compiles
    return Result([{"step": s, **curve[s]} for s in planned], {s: os.path.join(saved, str(s)) for s in planned},
                  prep.hf_config, parameters, prep.info, start or None,
                  *(float(x) for x in timed.mean(0)) if len(timed) else (None, None))
