"""lmprobe's own Orbax checkpoints: ``save`` a model during training, ``steps`` lists them, and
``restore`` puts one straight onto the shardings the engine plans.

Layout (an orbax CheckpointManager directory)::

    DIR/<step>/params/   the model's nnx.Param state (sharded; every process writes its shards)
    DIR/<step>/meta/     JSON: {"format": "lmprobe-orbax", "hf_config", "param_dtype", "metadata"}
    DIR/tokenizer/       the tokenizer (save_pretrained), written once

A step is finished when orbax says so (``not_finished``): orbax writes it under a temporary name and
renames it (a local disk), or writes it in place and adds ``commit_success.txt`` last (an object store,
gcsfuse: orbax's commit-file mode, in which a step without one is unfinished), and records its commit
time in the step's ``_CHECKPOINT_METADATA``. ``lmprobe.checkpoints.load`` (and ``Scorer.load``) take a
finished step directory, or DIR (its latest finished step).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import os
import re
import shutil
import sys
import tempfile
import traceback
from typing import NamedTuple

import jax
import numpy as np
from flax import nnx

from lmprobe.checkpoints.base import listing, read_json, unreadable
from lmprobe.errors import CheckpointError
from lmprobe.models import FAMILIES

FORMAT = "lmprobe-orbax"
PARAMS, META, TOKENIZER = "params", "meta", "tokenizer"
_STEP = re.compile(r"\d+")

__all__ = ["FORMAT", "OrbaxStep", "StandardStep", "commit_files", "find", "not_finished", "reading", "restore",
           "restore_standard", "save", "standard_steps", "standard_tree", "step_dirs", "steps"]
STANDARD = "orbax-standard"  # checkpoints of orbax's standard API (a user's own model: --model_fn)
_DONE = "_METADATA"  # an Orbax PyTree item's tree metadata, written when the item is complete
COMMIT = "commit_success.txt"  # orbax's mark of a finished step (commit-file mode; every step in recent orbax)


class OrbaxStep(NamedTuple):
    """One finished step of an lmprobe Orbax checkpoint directory."""

    root: str  # the CheckpointManager directory
    step: int
    path: str  # root/<step>
    meta: dict  # hf_config, param_dtype, metadata

    @property
    def tokenizer_dir(self) -> str:
        return os.path.join(self.root, TOKENIZER)


def save(directory, step: int, model: nnx.Module, *, hf_config: dict, tokenizer=None,
         metadata: dict | None = None) -> str:
    """Write ``model``'s parameters as step ``step`` of ``directory``; every process calls it (each
    writes the shards it holds). ``hf_config``: the config.json dict the model is built from;
    ``metadata``: JSON-able facts (loss, tokens). The tokenizer is saved once. Returns the step's path."""
    import orbax.checkpoint as ocp  # a slow import, on use

    if not isinstance(hf_config, dict) or not hf_config.get("model_type"):
        raise CheckpointError("save(..., hf_config=...) needs the model's config.json dict, with its "
                              "'model_type' (e.g. the dict lmprobe built the model from)")
    family = FAMILIES.get(hf_config["model_type"])
    if family is None or family.model is not type(model):
        raise CheckpointError(
            f"save: a {type(model).__name__} saved with model_type {hf_config['model_type']!r} could not be loaded "
            "back: lmprobe's layout is for its own families, with their config (llama, gpt2, ...); save your model's "
            "params with "
            "orbax's standard API (ocp.StandardCheckpointer, CheckpointManager) and sweep them with `lmprobe sweep "
            "--checkpoints=DIR --model_fn=MODULE:FUNCTION --tokenizer=NAME`")
    directory = os.path.abspath(os.fspath(directory))
    if int(step) in steps(directory):
        raise CheckpointError(f"step {int(step)} is already saved in '{directory}': save under a new step, or "
                              f"delete '{os.path.join(directory, str(int(step)))}' first")
    params = _nested(nnx.state(model, nnx.Param))
    dtypes = {str(np.dtype(a.dtype)) for a in jax.tree.leaves(params)}
    meta = {"format": FORMAT, "hf_config": hf_config, "param_dtype": sorted(dtypes)[0] if len(dtypes) == 1
            else sorted(dtypes), "metadata": dict(metadata or {})}
    options = ocp.CheckpointManagerOptions(create=True, enable_async_checkpointing=False)
    with ocp.CheckpointManager(directory, options=options) as manager:
        manager.save(int(step), args=ocp.args.Composite(**{PARAMS: ocp.args.StandardSave(params),
                                                             META: ocp.args.JsonSave(meta)}), force=True)
        manager.wait_until_finished()
    if tokenizer is not None and jax.process_index() == 0:
        _save_tokenizer(tokenizer, os.path.join(directory, TOKENIZER))
    return os.path.join(directory, str(int(step)))


def steps(directory) -> list[int]:
    """The finished steps of ``directory``, sorted (empty when there are none)."""
    return [step for step, why in step_dirs(directory) if not why]


def step_dirs(directory) -> list[tuple[int, str]]:
    """(step, why it is not finished yet: '' when it is) of every step of ``directory`` (a numbered
    directory with meta/), sorted by step."""
    directory = os.fspath(directory)
    if not os.path.isdir(directory):
        return []
    found = sorted(int(n) for n in os.listdir(directory)
                   if _STEP.fullmatch(n) and os.path.isdir(os.path.join(directory, n, META)))
    commit_file = found and commit_files(directory)
    return [(step, not_finished(os.path.join(directory, str(step)), commit_file)) for step in found]


def commit_files(directory) -> bool:
    """Whether the writer of ``directory``'s numbered steps marks a finished one with commit_success.txt
    (one of them has it)."""
    return any(_STEP.fullmatch(n) and os.path.isfile(os.path.join(directory, n, COMMIT)) for n in os.listdir(directory))


def not_finished(step_dir, commit_file: bool | None = None) -> str:
    """Why orbax does not count ``step_dir`` as a finished step, '' when it does: orbax's own check
    (``ocp.step.is_path_finalized``) in its writer's mode, commit-file mode when ``commit_file``
    (default: a numbered step beside it has commit_success.txt; then it needs its own), else a step
    is finished unless it is under orbax's temporary name."""
    import orbax.checkpoint as ocp

    step_dir = os.path.abspath(os.fspath(step_dir))
    if commit_file is None:
        commit_file = commit_files(os.path.dirname(step_dir))
    mode = ocp.options.AtomicityOptions(ocp.options.AtomicityMode.COMMIT_FILE) if commit_file else None
    if ocp.step.is_path_finalized(step_dir, atomicity_options=mode):
        return ""
    if commit_file:
        return f"it has no {COMMIT}, which orbax writes last (the other steps have theirs)"
    return "it is under orbax's temporary name" if os.path.isdir(step_dir) else "it is not a directory"


def find(path) -> OrbaxStep | None:
    """The step ``path`` names (a step directory, or a checkpoint directory: its latest finished step),
    or None when ``path`` is not an lmprobe Orbax checkpoint; CheckpointError for a step that is not
    finished or whose metadata is missing or damaged."""
    path = os.path.abspath(os.fspath(path))
    if os.path.isdir(os.path.join(path, META)) and os.path.isdir(os.path.join(path, PARAMS)):
        root, name = os.path.split(path)
        step = int(name) if _STEP.fullmatch(name) else 0
        why = not_finished(path)
        if why:
            raise CheckpointError(f"Orbax step '{path}' is not finished ({why}): load it once its writer has "
                                  "finished it, or load a finished step")
    else:
        found = steps(path)
        if not found:
            return None
        root, step = path, found[-1]
        path = os.path.join(root, str(step))
    where = os.path.join(path, META, "metadata")
    if not os.path.isfile(where):
        raise CheckpointError(f"Orbax step '{path}' has no metadata ('{where}' is missing): the step is incomplete "
                              "or damaged; re-save it, or load another step")
    meta = read_json(where, "Orbax checkpoint metadata")
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        return None
    if not isinstance(meta.get("hf_config"), dict):
        raise CheckpointError(f"Orbax checkpoint metadata '{where}' has no hf_config (the model's config.json "
                              "dict): the step is damaged; re-save it")
    return OrbaxStep(root, step, path, meta)


def restore(step: OrbaxStep, abstract_state: nnx.State, place=None) -> nnx.State:
    """``abstract_state`` (an nnx.eval_shape model's Param state, each leaf with its logical ``axes``)
    filled from ``step``, each array read straight onto ``place.sharding(shape, axes)`` (default: the
    default device) in the abstract leaf's dtype: no array is gathered on one host, and at most one
    array's bytes are being read at a time."""
    import orbax.checkpoint as ocp

    default = jax.sharding.SingleDeviceSharding(jax.devices()[0])
    flat = list(nnx.to_flat_state(abstract_state))
    target = {}
    for key, var in flat:
        shape, axes = tuple(var.get_value().shape), tuple(var.get_metadata().get("axes") or ())
        sharding = place.sharding(shape, axes) if place is not None else default
        target[_key(key)] = jax.ShapeDtypeStruct(shape, var.get_value().dtype, sharding=sharding)
    target = _nest(target)
    where = os.path.join(step.path, PARAMS)
    # one array in flight at a time (orbax's default: 96 GB), so that the host holds little beside the model
    largest = max(math.prod(a.shape) * np.dtype(a.dtype).itemsize for a in jax.tree.leaves(target))
    handler = ocp.StandardCheckpointHandler(restore_concurrent_gb=(largest + (1 << 20)) / 1e9)
    # reading: absl quiet (an item has no _CHECKPOINT_METADATA of its own), damage in one line
    with ocp.Checkpointer(handler) as checkpointer, reading(f"Orbax checkpoint '{where}'"):
        saved = checkpointer.metadata(where).item_metadata
        if saved is None:
            raise CheckpointError(f"Orbax checkpoint '{where}' has no {_DONE} (the arrays' metadata): the step is "
                                  "incomplete or damaged; re-save it")
        _check_shapes(saved.tree, target, where)
        restored = checkpointer.restore(where, args=ocp.args.StandardRestore(target))
    for key, var in flat:
        node = restored
        for part in _key(key).split("/"):
            node = node[part]
        var.set_value(node)
    return abstract_state


@contextlib.contextmanager
def reading(what: str):
    """Around an orbax read of ``what`` ("Orbax checkpoint 'DIR'"): absl's warnings kept off stderr, a
    failure (a truncated array, a missing chunk) as one CheckpointError naming ``what`` and its cause,
    and nothing printed by the reads orbax abandons when one fails (``_hush_abandoned_reads``)."""
    _hush_abandoned_reads()
    with _quiet_absl(), unreadable(what):
        yield


def _hush_abandoned_reads() -> None:
    """When one array read fails, orbax closes its event loop with the other reads pending; each then
    fails on its own, later, printing a traceback: 'Event loop is closed' (TensorStore's callback, via
    sys.excepthook), 'Exception ignored in: <coroutine ...>' (sys.unraisablehook) and 'Task exception
    was never retrieved' (asyncio's log). These hooks (wrapped again if someone replaced them) and a
    log filter drop those and pass everything else on."""
    if not getattr(sys.excepthook, "lmprobe_hush", False):
        previous_excepthook = sys.excepthook

        def excepthook(kind, value, tb):
            if not _loop_closed(value):
                previous_excepthook(kind, value, tb)

        excepthook.lmprobe_hush = True
        sys.excepthook = excepthook
    if not getattr(sys.unraisablehook, "lmprobe_hush", False):
        previous_unraisablehook = sys.unraisablehook

        def unraisablehook(unraisable):
            code = getattr(unraisable.object, "cr_code", None)
            if not (_loop_closed(unraisable.exc_value) or _in_orbax(getattr(code, "co_filename", None))):
                previous_unraisablehook(unraisable)

        unraisablehook.lmprobe_hush = True
        sys.unraisablehook = unraisablehook
    logging.getLogger("asyncio").addFilter(_never_retrieved)  # once: a filter is added once


def _loop_closed(error) -> bool:
    """An abandoned read's 'Event loop is closed' (raised in asyncio, called from TensorStore: no frame of
    anyone's code)."""
    frames = traceback.extract_tb(error.__traceback__) if isinstance(error, RuntimeError) else []
    return str(error) == "Event loop is closed" and bool(frames) and all(
        os.path.dirname(asyncio.__file__) == os.path.dirname(f.filename) for f in frames)


def _in_orbax(filename: str | None) -> bool:
    return filename is not None and f"{os.sep}orbax{os.sep}checkpoint{os.sep}" in filename


def _never_retrieved(record: logging.LogRecord) -> bool:
    """False (dropped) for asyncio's 'Task exception was never retrieved' of an orbax read."""
    error = record.exc_info[1] if record.exc_info else None
    frames = traceback.extract_tb(error.__traceback__) if error is not None else []
    return not (str(record.msg).startswith("Task exception was never retrieved")
                and any(_in_orbax(f.filename) for f in frames))


@contextlib.contextmanager
def _quiet_absl():
    """absl's warnings (orbax's "Metadata file does not exist" for an item read on its own) kept off stderr."""
    logger = logging.getLogger("absl")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)


def _check_shapes(saved: dict, target: dict, where: str, prefix: str = "") -> None:
    """One CheckpointError for the first parameter missing from ``saved`` or shaped otherwise."""
    for name, want in target.items():
        path = f"{prefix}{name}"
        got = saved.get(name) if isinstance(saved, dict) else None
        if isinstance(want, dict):
            _check_shapes(got if isinstance(got, dict) else {}, want, where, path + ".")
        elif got is None:
            raise CheckpointError(f"parameter '{path}' is missing from the Orbax checkpoint '{where}': it was "
                                  "saved from a different model than its hf_config describes; re-save it")
        elif tuple(got.shape) != tuple(want.shape):
            raise CheckpointError(f"parameter '{path}' in '{where}' has shape {tuple(got.shape)}, but its hf_config "
                                  f"implies {tuple(want.shape)}: re-save the checkpoint with the model's config")


def _key(path: tuple) -> str:
    return "/".join(map(str, path))


def _nest(flat: dict) -> dict:
    out: dict = {}
    for key, value in flat.items():
        *parents, leaf = key.split("/")
        node = out
        for p in parents:
            node = node.setdefault(p, {})
        node[leaf] = value
    return out


def _nested(state: nnx.State) -> dict:
    """A plain nested dict of arrays (string keys) from an nnx.State."""
    return _nest({_key(path): var.get_value() for path, var in nnx.to_flat_state(state)})


def _save_tokenizer(tokenizer, target: str) -> None:
    """``tokenizer.save_pretrained`` into ``target`` once, atomically (a temporary directory renamed)."""
    if os.path.isdir(target):
        return
    tmp = tempfile.mkdtemp(prefix=".tokenizer-", dir=os.path.dirname(target))
    try:
        tokenizer.save_pretrained(tmp)
        os.rename(tmp, target)
    except OSError:
        if not os.path.isdir(target):
            raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


class StandardStep(NamedTuple):
    """One checkpoint written by orbax's standard API (StandardCheckpointer, CheckpointManager)."""

    step: int
    path: str  # the PyTree item orbax restores (it holds _METADATA)
    unfinished: str = ""  # why orbax does not count it as finished yet (not_finished); '' when it does


def standard_steps(path, params_key: str | None = None) -> list[StandardStep]:
    """The checkpoints of orbax's standard API at ``path``, sorted by step: a CheckpointManager directory's
    steps (``<step>/<item>/``; of several items, the one ``params_key`` starts with, else 'params',
    'state' or 'default'), or one checkpoint (``path`` or ``path/<item>`` holds _METADATA: step 0, or the
    number ``path`` is named). Empty when there are none; steps under orbax's temporary names are not
    listed, and a step orbax has not finished says why (``unfinished``)."""
    path = os.path.abspath(os.fspath(path))
    if not os.path.isdir(path):
        return []
    one = _item(path, params_key)
    if one is not None:
        name = os.path.basename(path)
        return [StandardStep(int(name) if _STEP.fullmatch(name) else 0, one, not_finished(path))]
    found, commit_file = [], commit_files(path)
    for name in os.listdir(path):
        item = _item(os.path.join(path, name), params_key) if _STEP.fullmatch(name) else None
        if item is not None:
            found.append(StandardStep(int(name), item, not_finished(os.path.join(path, name), commit_file)))
    return sorted(found)


def _item(path: str, params_key: str | None) -> str | None:
    """The PyTree item of the checkpoint at ``path`` (itself or one of its item directories), or None."""
    if os.path.isfile(os.path.join(path, _DONE)):
        return path
    if not os.path.isdir(path):
        return None
    items = sorted(n for n in os.listdir(path) if os.path.isfile(os.path.join(path, n, _DONE)))
    first = _parts(params_key)[:1]
    for choice in (first, [n for n in ("params", "state", "default") if n in items][:1], items):
        if len(choice) == 1 and choice[0] in items:
            return os.path.join(path, choice[0])
    if items:
        raise CheckpointError(f"checkpoint '{path}' holds the items {', '.join(items)}: say which holds the "
                              f"parameters with `params_key={items[0]}/...` (the item, then the path inside it)")
    return None


def _parts(params_key: str | None) -> list[str]:
    return [p for p in re.split(r"[/.]", params_key or "") if p]


def standard_tree(step: StandardStep, params_key: str | None = None) -> tuple[object, list[str]]:
    """(the parameters' tree of ``step``, leaves as orbax's ArrayMetadata (shape, dtype), and its path
    in the saved tree): under ``params_key`` ('/'- or '.'-separated; its first part may name the
    item), else the saved tree's 'params' (a Flax TrainState) when it has one, else the whole tree."""
    import orbax.checkpoint as ocp

    with ocp.PyTreeCheckpointer() as checkpointer, reading(f"Orbax checkpoint '{step.path}'"):
        saved = checkpointer.metadata(step.path).item_metadata
        if saved is None:
            raise CheckpointError(f"Orbax checkpoint '{step.path}' has no readable {_DONE}: the step is incomplete "
                                  "or damaged; re-save it")
        tree = saved.tree
    parts = _parts(params_key)
    if parts and parts[0] == os.path.basename(step.path) and parts[0] not in _keys(tree):
        parts = parts[1:]  # the item's name
    if params_key is None:
        parts = ["params"] if isinstance(tree, dict) and isinstance(tree.get("params"), dict | list) else []
    node = tree
    for i, part in enumerate(parts):
        keys = _keys(node)
        if part not in keys:
            at = "/".join(parts[:i]) or "the top"
            raise CheckpointError(f"`params_key={params_key}`: checkpoint '{step.path}' has no '{part}' at {at} "
                                  f"(there: {', '.join(keys[:8]) or 'an array'}): give the path of the parameters")
        node = node[int(part)] if isinstance(node, list | tuple) else node[part]
    return node, parts


def _keys(node) -> list[str]:
    if isinstance(node, dict):
        return [str(k) for k in node]
    return [str(i) for i in range(len(node))] if isinstance(node, list | tuple) else []


def leaf_shapes(tree) -> dict[str, tuple[tuple, str]]:
    """{'a/b/0/w': (shape, dtype name)} of a tree of array metadata or arrays."""
    flat = jax.tree_util.tree_flatten_with_path(tree, is_leaf=lambda x: hasattr(x, "shape"))[0]
    return {jax.tree_util.keystr(path, simple=True, separator="/"): (tuple(x.shape), str(np.dtype(x.dtype)))
            for path, x in flat}


def restore_standard(step: StandardStep, tree, parts: list[str], sharding) -> object:
    """The parameters ``tree`` (``standard_tree``) of ``step``, each array read by orbax straight onto
    ``sharding(shape)`` (nothing gathered on one host), in its saved dtype."""
    import orbax.checkpoint as ocp

    target = jax.tree.map(lambda m: jax.ShapeDtypeStruct(tuple(m.shape), m.dtype, sharding=sharding(tuple(m.shape))),
                          tree, is_leaf=lambda x: hasattr(x, "shape"))
    item = target
    for part in reversed(parts):
        item = {part: item}
    args = ocp.args.PyTreeRestore(item=item, restore_args=ocp.checkpoint_utils.construct_restore_args(item),
                                  partial_restore=True)
    with ocp.PyTreeCheckpointer() as checkpointer, reading(f"Orbax checkpoint '{step.path}'"):
        got = checkpointer.restore(step.path, args=args)
    for part in parts:
        got = got[part]
    return got


def not_a_checkpoint(path: str) -> CheckpointError:
    """The error for a directory that holds no checkpoint lmprobe recognises."""
    return CheckpointError(
        f"checkpoint directory '{path}' has no config.json, nor any checkpoint lmprobe recognises ({listing(path)}): "
        "expected a "
        "Hugging Face directory (config.json + model.safetensors), an lmprobe Orbax checkpoint (numbered step "
        "directories with params/ and meta/, from lmprobe.checkpoints.orbax_io.save) or a MaxText checkpoint "
        "with a config.json beside it")
