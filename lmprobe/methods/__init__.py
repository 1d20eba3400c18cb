"""Evaluation methods, one module (or package) each: a pipeline from inputs to a typed result.

The five papers, cited by authors and arXiv id (sections, equations and tables refer to that version):
``syntextbench``: Ko, Chen, Das, Chuang, Daniel, "On Robustness-Accuracy Characterization of Language Models
using Synthetic Datasets", COLM 2024 (OpenReview C0j44uRPcl); ``byod``: Jain et al., "Bring Your Own Data!
Self-Supervised Evaluation for Large Language Models", arXiv:2306.13651; ``scope``: Rawal & Toneva, "Perturbed
examples reveal invariances shared by language models", arXiv:2311.04166v1; ``synbench``: Ko, Chen, Mohapatra,
Das, Daniel, "SynBench: Task-Agnostic Benchmarking of Pretrained Representations using Synthetic Data",
arXiv:2210.02989; ``mstemp``: Liu, Chen, Wang, Mei, Xie, "Meta Semantic Template for Evaluation of Large
Language Models", arXiv:2310.01448v2.

``icl``: in-context-learning accuracy; ``loss_data``: the loss-data baselines (Val loss, MDL, SDL, eSC)
SynTextBench compares against; ``robust_probe``: SynBench's eps-robust linear probing.
"""

from lmprobe.errors import LmprobeError
from lmprobe.models import CAUSAL_LM, ENCODER


def require_kind(what: str, name: str, kind: str, accepted) -> None:
    """LmprobeError unless ``what`` (a method, or one of its roles) takes a model of ``kind``
    (lmprobe.models: CAUSAL_LM, ENCODER, ENCODER_DECODER): one line naming the model, its kind and
    the kinds ``accepted``."""
    if kind in accepted:
        return
    example = {CAUSAL_LM: " such as smollm2-135m", ENCODER: " such as minilm-l6"}.get(accepted[0], "")
    raise LmprobeError(f"{what} needs {' or '.join(map(_a, accepted))}; '{name}' is {_a(kind)}: give "
                       f"{_a(accepted[0])}{example}")


def _a(kind: str) -> str:
    return f"{'an' if kind[0] in 'aeiou' else 'a'} {kind}"


def model_key(model) -> dict:
    """What decides a model's outputs, for cache keys: its ``identity`` (a Scorer's, a SCoPE
    model's, or an identity dict) without where its checkpoint lies (a moved hub cache keeps its
    caches); ``{"class": ...}`` for a stand-in without one."""
    about = model if isinstance(model, dict) else getattr(model, "identity", None)
    return _without_location(about) if about is not None else {"class": type(model).__qualname__}


def _without_location(value):
    if isinstance(value, dict):
        return {k: _without_location(v) for k, v in value.items() if k != "location"}
    return value


def no_progress(iterable, **_):
    """The default ``progress``: no bar (front ends pass a tqdm-like one)."""
    return iterable


class Ticker:
    """A tqdm-like ``progress(iterable, desc=, total=)`` moved by hand: ``advance(n)`` after n
    units of work, for work that is not one loop (cached stages, chunks of several calls). The
    bar starts at 0 when built and closes when ``total`` units are done."""

    def __init__(self, progress, total: int, desc: str):
        self.done = 0
        self._units = iter(progress(range(total), desc=desc, total=total))
        next(self._units, None)  # a tqdm bar counts an item done when the next one is asked for

    def advance(self, n: int = 1) -> None:
        for _ in range(n):
            next(self._units, None)
        self.done += max(n, 0)

    def advance_to(self, done: int) -> None:
        """Mark ``done`` units done in all (work that was skipped, e.g. read from a cache)."""
        self.advance(done - self.done)
