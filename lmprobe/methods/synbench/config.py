"""SynBench's settings (``Config``) and constants: the paper's budgets and thresholds, sample sizes, cache
version."""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from lmprobe.data import gaussian
from lmprobe.errors import LmprobeError
from lmprobe.methods import loss_data, robust_probe

PAPER_EPSILONS = (0.0, 0.2, 0.4, 0.6, 0.8)
PAPER_THRESHOLDS = (0.6, 0.7, 0.75, 0.8, 0.85, 0.9)  # Tables 3, 5, 7, 8
NORMS = (1.0, 2.0, math.inf)
DEFAULT_SEQ_LEN = 8  # tokens per Gaussian "sentence" fed to a language model (* not in the paper)
INPUTS = ("embedding", "rms")  # a language model's Gaussian inputs (scorer_representation)
EMBEDDING_SAMPLE = 32768  # token ids whose embeddings give the inputs' mean and covariance
DEFAULT_INPUT_SCALES = (0.25, 0.5, 1.0, 2.0)  # input_scale_sweep: factors on the inputs' deviation from the mean
DEFAULT_N_RATIO = 20  # n_for_width: samples per split per representation dimension
MAX_N = 1 << 20  # samples per split and scale: 512 times the paper's 2048
CEILING_BATCH = 1024  # ceiling: Gaussian samples per batch of the identity (no model memory to mind)
CURVE_GRID = tuple(float(a) for a in np.linspace(0.5, 1.0, 201))
CACHE_VERSION = 5  # in every key: raised when what an entry holds changes, so that older entries are recomputed
DOWNSTREAM_SEED_OFFSET = 10_000  # the robust probe's downstream task: seed + this, never a scored sample
STDERR_DRAWS = 400  # corrected_stderr: parametric resamples of the plug-in distances (sd known to ~4%)


@dataclasses.dataclass(frozen=True)
class Config:
    epsilons: tuple[float, ...] = PAPER_EPSILONS  # robust budgets (fractions of ||mu|| unless --no_relative_epsilon)
    a_t: tuple[float, ...] = PAPER_THRESHOLDS  # threshold accuracies, each in (0.5, 1)
    # class-mean scales: paper (0.1, ..., 5.0), reference (0.1, ..., 4.9) or numbers (default: paper)
    scales: tuple[float, ...] = gaussian.PAPER_SCALES
    n: int = 2048  # samples per scale in each of the train and test splits
    covariance: str = "identity"  # covariance of the Gaussians
    band: tuple[float, ...] = gaussian.DEFAULT_BAND  # band covariance: autocovariance c0,c1,c2 per channel
    prior: float = 0.5  # class prior tau = P(y = +1)
    norm: float = 2.0  # p of the l_p budget: 1, 2 or inf
    relative_epsilon: bool = True  # eps is a fraction of ||mu|| (--no_relative_epsilon or --absolute_eps: the radius)
    seed: int = 0
    batch_size: int = 64  # Gaussian samples per generated batch, each fed to the representation at once
    robust_probe: bool = False  # after scoring: standard and eps-robust linear probes at eps = argmax score (Table 6)
    probe_a_t: float = 0.7  # the robust probe's eps is argmax_eps SynBench-Score at this a_t (one of a_t)
    probe_attack: str = "input"  # robust probe's PGD-l2 attacks the input through f (the paper) or the representation
    probe_scale: float = 1.0  # robust probe's downstream task: a held-out labelled Gaussian task at this scale
    probe_n: int | None = None  # robust probe's train and test samples each (none: n)
    probe_steps: int = 1000  # Adam steps of each linear probe (batch 256, lr 1e-2, 10 PGD steps each)
    baselines: bool = False  # App. G: loss-data baselines Val loss / MDL / SDL / eSC on the cached representations
    baseline_scale: float = 1.0  # the scale (one of scales) whose train-split representations the baselines see
    baseline_steps: int = 4000  # training steps of the loss-data baselines' probes

    def check(self) -> None:
        """Bad settings fail here, before any model is loaded."""
        if not self.a_t or any(not 0.5 < a < 1 for a in self.a_t):
            raise LmprobeError(f"a_t={list(self.a_t)}: every threshold accuracy must lie in (0.5, 1) "
                               "(accuracies of a binary task start at 0.5)")
        if not self.epsilons or any(not e >= 0 for e in self.epsilons):
            raise LmprobeError(f"epsilons {list(self.epsilons)} must be non-empty and >= 0")
        if not self.scales or any(not s > 0 for s in self.scales):
            raise LmprobeError(f"scales {list(self.scales)} must be non-empty and > 0")
        if self.relative_epsilon and max(self.epsilons) >= 1:
            raise LmprobeError(f"eps={max(self.epsilons)} is a relative budget eps * ||mu||: it must be < 1, "
                               "else it covers the whole class-mean half-distance and leaves no classifier")
        if not self.relative_epsilon and max(self.epsilons) >= max(self.scales):
            raise LmprobeError(f"eps={max(self.epsilons)} is not below the class-mean half-distance of any "
                               f"scale (largest {max(self.scales)}): use eps < {max(self.scales)}")
        if self.norm not in NORMS:
            raise LmprobeError(f"norm={self.norm}: l_p budgets are supported for p in 1, 2, inf")
        if self.covariance == "band" and self.norm != 2:
            raise LmprobeError("the band-covariance raw reference is implemented for l2 budgets only: "
                               "use `norm=2` or `covariance=identity`")
        if not 8 <= self.n <= MAX_N:
            raise LmprobeError(f"`n={self.n}` samples per split: use 8 (to estimate class means) to {MAX_N:,} (their "
                               "representations are held on the host: 4 GiB per split at width 1024)")
        if not 1 <= self.batch_size <= MAX_N:
            raise LmprobeError(f"batch_size={self.batch_size} (Gaussian samples per batch) must be in [1, {MAX_N:,}]")
        gaussian.GaussianSpec((1,), self.covariance, self.band, None, self.prior).check()
        if self.robust_probe:
            if not any(math.isclose(self.probe_a_t, a) for a in self.a_t):
                raise LmprobeError(f"probe_a_t={self.probe_a_t} is not one of a_t {list(self.a_t)}: the robust "
                                   "probe's eps is the argmax of the score at that threshold")
            if not self.probe_scale > 0:
                raise LmprobeError(f"probe_scale={self.probe_scale} must be > 0")
            if self.probe_n is not None and not 8 <= self.probe_n <= MAX_N:
                raise LmprobeError(f"`probe_n={self.probe_n}` samples for a probe: use 8 to {MAX_N:,}")
            robust_probe.RobustProbeConfig(epsilon=max(self.epsilons), relative_epsilon=self.relative_epsilon,
                                     attack=self.probe_attack, steps=self.probe_steps).check()
        if self.baselines:
            if not any(math.isclose(self.baseline_scale, s) for s in self.scales):
                raise LmprobeError(f"baseline_scale={self.baseline_scale} is not one of the scales: the baselines "
                                   "run on that scale's cached representations")
            if self.n < loss_data.MIN_SAMPLES or self.baseline_steps < 1:
                raise LmprobeError(f"the loss-data baselines need n >= {loss_data.MIN_SAMPLES} and baseline_steps "
                                   f">= 1; got n={self.n}, baseline_steps={self.baseline_steps}")
