"""Checkpoints of a user's own JAX model, saved with orbax's standard API, as Scorers: what
``lmprobe sweep --checkpoints=DIR --model_fn=MODULE:FUNCTION --tokenizer=NAME`` runs, and the same
in Python.

    own = OwnModel("mymodel:build", "smollm2-135m")     # build(params) -> CallableLM or nnx.Module
    probe = ProxyCallback(own.tokenizer, run_dir="runs/sweep")
    for found in own.discover("runs/x/checkpoints"):    # CheckpointManager steps, or one checkpoint
        probe(found.step, own.model(found))              # the in-loop rows, for saved steps

``MODULE`` is imported from the current directory (put on sys.path for that import only) or
PYTHONPATH: importing it and calling ``FUNCTION`` run that code, as ``python -c`` would; name only code
you trust. A step's parameters are the saved tree's ``params`` (a Flax TrainState) when it has one,
else the whole tree, or ``params_key`` ('opt/params'); each array is read by orbax straight onto its
sharding on lmprobe's mesh (fully sharded over 'data' along its largest axis that divides, else
replicated): nothing is gathered on one host. Every step of a directory must hold the same tree (one
model): ``discover`` checks the shapes from orbax's metadata before any weight is read.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import sys

import numpy as np
from flax import nnx
from jax.sharding import NamedSharding, PartitionSpec

from lmprobe.checkpoints import orbax_io
from lmprobe.checkpoints.discover import Found
from lmprobe.engine import Scorer, make_mesh, model_identity
from lmprobe.errors import CheckpointError, LmprobeError
from lmprobe.methods.stages import STAGES, missing
from lmprobe.models import CallableLM


class OwnModel:
    """``model_fn`` ('MODULE:FUNCTION' or a callable), ``FUNCTION(params)`` -> a CallableLM or an
    nnx.Module whose ``__call__(ids, mask)`` gives logits or (logits, hidden); the tokenizer (a name
    or directory for lmprobe.checkpoints.resolve, or a tokenizer); ``params_key``: the parameters'
    path in the saved tree."""

    def __init__(self, model_fn, tokenizer, *, params_key: str | None = None, model_parallel: int = 1,
                 batch_size: int = 16):
        self.name, self.fn = _function(model_fn)
        self.tokenizer = _tokenizer(tokenizer) if isinstance(tokenizer, str | os.PathLike) else tokenizer
        self.params_key, self.batch_size = params_key, batch_size
        self.mesh = make_mesh(model_parallel)
        self.shapes: dict | None = None  # the first step's leaves: every step must have them
        self.last: tuple[str, Scorer] | None = None  # (path, Scorer) of the latest step

    def discover(self, path) -> list[Found]:
        """The steps at ``path`` (orbax_io.standard_steps), checked to hold one model's tree."""
        steps = orbax_io.standard_steps(path, self.params_key)
        if not steps:
            raise LmprobeError(f"'{path}' holds no checkpoint of orbax's standard API (a CheckpointManager "
                               "directory of numbered steps, or one StandardCheckpointer checkpoint): give the "
                               "directory your trainer saves to")
        first, unreadable = None, []
        for step in (s for s in steps if not s.unfinished):  # an unfinished step is checked once it is finished
            try:
                shapes = orbax_io.leaf_shapes(orbax_io.standard_tree(step, self.params_key)[0])
            except CheckpointError as e:  # a damaged step: its load says why (a sweep scores the others)
                unreadable.append(e)
                continue
            if self.shapes is None:
                self.shapes, first = shapes, step
            elif shapes != self.shapes:
                against = f"step {first.step}" if first else "the first step swept"
                raise LmprobeError(f"'{path}' holds two different models: "
                                   f"{_difference(self.shapes, shapes, against, f'step {step.step}')}: sweep one "
                                   "model's checkpoints at a time")
        if unreadable and self.shapes is None:  # no step read: the settings (params_key), not a damaged step
            raise unreadable[0]
        return [Found(s.step, s.path, orbax_io.STANDARD, s.unfinished) for s in steps]

    def params(self, found: Found):
        """``found``'s parameters, each array on its sharding."""
        step = orbax_io.StandardStep(found.step, found.path)
        tree, parts = orbax_io.standard_tree(step, self.params_key)
        shapes = orbax_io.leaf_shapes(tree)
        if self.shapes is not None and shapes != self.shapes:
            raise LmprobeError(f"'{found.path}' holds another model than the first step: "
                               f"{_difference(self.shapes, shapes, 'the first step', f'step {found.step}')}")
        return orbax_io.restore_standard(step, tree, parts, self.sharding)

    def sharding(self, shape: tuple) -> NamedSharding:
        """Fully sharded over 'data' along the largest axis it divides; replicated when none does."""
        n = self.mesh.shape["data"]
        fits = [i for i in np.argsort(shape)[::-1] if n > 1 and shape[i] % n == 0]
        spec = [None] * len(shape)
        if fits:
            spec[fits[0]] = "data"
        return NamedSharding(self.mesh, PartitionSpec(*spec))

    def model(self, found: Found) -> nnx.Module:
        """``FUNCTION(params)`` of ``found``, checked: a CallableLM or an nnx.Module."""
        params = self.params(found)
        try:
            model = self.fn(params)
        except LmprobeError as e:
            raise LmprobeError(f"`model_fn={self.name}` on step {found.step}: {e}") from e
        except Exception as e:  # the user's code: where it failed, in one line
            first = (str(e).strip().splitlines() or [""])[0]
            raise LmprobeError(f"`model_fn={self.name}` raised {type(e).__name__}: {first} (on the parameters of "
                               f"step {found.step}, '{found.path}')") from e
        if not isinstance(model, nnx.Module):
            raise LmprobeError(f"`model_fn={self.name}` returned a {type(model).__name__}: return lmprobe.models."
                               "CallableLM(apply, params, max_length=...) or an nnx.Module whose __call__(ids, mask) "
                               "gives logits or (logits, hidden)")
        return model

    def scorer(self, found: Found) -> Scorer:
        """A Scorer of ``found``'s model, identified by the function and the step's files (cache keys).
        One Scorer serves every step: later steps' weights are swapped in (``Scorer.update``), so its
        compiled programs are reused (for a CallableLM: its params, run by the first step's apply)."""
        if self.last is not None and self.last[0] == found.path:
            return self.last[1]
        model = self.model(found)
        about = {**model_identity(model), "name": f"{self.name}@{found.step}",
                 "checkpoint": {"path": found.path, "step": found.step, "fingerprint": found.fingerprint()}}
        if self.last is not None:
            scorer = self.last[1]
            self.last = None  # the previous weights go when the new ones are in
            # a CallableLM's params: the first step's function runs them (build may make a new closure each call)
            scorer.update(model.params.get_value() if isinstance(model, CallableLM) else model, identity=about)
            self.last = (found.path, scorer)
            return scorer
        scorer = Scorer(model, self.tokenizer, mesh=self.mesh, batch_size=self.batch_size, identity=about)
        vocab = len(self.tokenizer)
        if vocab > scorer.vocab_size:
            raise LmprobeError(f"the tokenizer has {vocab} ids but the logits of `model_fn={self.name}` have "
                               f"{scorer.vocab_size} (their last axis): give the tokenizer the model was trained "
                               "with (`tokenizer`)")
        self.last = (found.path, scorer)
        return scorer

    def check(self, found: Found, stages) -> Scorer:
        """The first step's Scorer, or one error naming the sweep ``stages`` (lmprobe.methods.stages)
        that apply to its model but that it cannot run."""
        scorer = self.scorer(found)
        why = missing([s for s in stages if STAGES[s].applies(scorer)], scorer, own_model=True)
        if why:
            keep = ",".join(s for s in stages if s not in why)
            raise LmprobeError(f"`methods`: {'; '.join(f'{s} needs {r}' for s, r in why.items())}: "
                               + (f"use `methods={keep}`" if keep else "give other methods"))
        return scorer


def _function(spec):
    """('MODULE:FUNCTION', the function) of ``spec``, imported from the current directory or PYTHONPATH."""
    if callable(spec):
        return f"{getattr(spec, '__module__', '')}:{getattr(spec, '__qualname__', type(spec).__name__)}", spec
    module, _, name = str(spec).partition(":")
    if not module or not name:
        raise LmprobeError(f"`model_fn={spec}`: give MODULE:FUNCTION (e.g. mymodel:build, a file mymodel.py in "
                           "the current directory, FUNCTION(params) returning a CallableLM or nnx.Module)")
    try:
        with _current_directory_importable():
            found = importlib.import_module(module)
    except Exception as e:
        first = (str(e).strip().splitlines() or [""])[0]
        raise LmprobeError(f"`model_fn={spec}`: module '{module}' cannot be imported ({type(e).__name__}: {first}):"
                           " run from the directory that holds it, or add that directory to PYTHONPATH") from e
    fn = getattr(found, name, None)
    if not callable(fn):
        raise LmprobeError(f"`model_fn={spec}`: module '{module}' ({found.__file__}) has no function '{name}'")
    return str(spec), fn


@contextlib.contextmanager
def _current_directory_importable():
    """The current directory first on sys.path for the block only (a module beside the command), so that
    later imports of the process do not look there first."""
    here = os.getcwd()
    added = here not in sys.path and "" not in sys.path
    if added:
        sys.path.insert(0, here)
    try:
        yield
    finally:
        if added and here in sys.path:
            sys.path.remove(here)


def _tokenizer(name):
    """The tokenizer of a directory holding one (tokenizer.save_pretrained), else of a model name or path."""
    from lmprobe.checkpoints.resolve import resolve
    from lmprobe.checkpoints.tokenizer import TOKENIZER_FILES, directory_tokenizer

    name = os.fspath(name)
    try:
        if os.path.isdir(name) and any(os.path.isfile(os.path.join(name, f)) for f in TOKENIZER_FILES):
            return directory_tokenizer(name)
        return resolve(name).tokenizer()
    except LmprobeError as e:
        raise LmprobeError(f"`tokenizer={name}`: {e}") from e


def _difference(want: dict, got: dict, want_name: str, got_name: str) -> str:
    """The first leaf that ``got`` lacks, adds or shapes otherwise than ``want``, with both shapes."""
    def show(x):
        return "missing" if x is None else f"{x[1]}{list(x[0])}"

    leaf = next(k for k in sorted(want.keys() | got.keys()) if want.get(k) != got.get(k))
    return f"leaf '{leaf}' is {show(got.get(leaf))} in {got_name} and {show(want.get(leaf))} in {want_name}"
