"""SynBench (Ko et al., arXiv:2210.02989): robustness-accuracy of representations on synthetic Gaussian data.

    class-conditional Gaussians, one task per scale s (lmprobe.data.gaussian; Sec. 3.1, 3.3)
    -> raw-data reference: accuracy a(s, eps) and expected scaled bound of the eps-robust Bayes
       classifier in closed form (Thm 1 (iii)-(iv), Thm 2 for l_p, Thm 3 for tau != 1/2)
    -> representations z = f(x) of train and test samples, cached per (scale, split)
    -> class means and pooled covariance of the train split, eps-robust Bayes classifier for
       every eps, accuracy and mean scaled bound over correctly classified test samples
       (Thm 1 (ii), Sec. 3.2.2; kernels.bayes.synbench_accuracy_bound)
    -> E(a_t) = (1/n) sum_i bound_i 1[a_i > a_t] and SynBench-Score = int_{a_t}^1 E_rep /
       int_{a_t}^1 E_raw, integrated exactly (Eq. 2-3; kernels.integrals.synbench_score)

Conventions (* marks a choice the paper leaves open):
* eps is relative by default, a radius eps * ||mu||_p in each space (the public code); with
  ``relative_epsilon=False`` it is the radius itself (the paper's text). Relative eps must be
  < 1 (at 1 the budget swallows the class-mean half-distance and no classifier is left).
* Raw reference of the band covariance: w = (Sigma + kappa I)^{-1} mu from banded solves of
  one channel block (every block is the same and mu is constant), never a d x d matrix.
* Imbalanced classes (App. D): the classifier is sign(w^T (x - c) - q/2), q = ln((1-tau)/tau),
  w = Sigma^{-1}(mu - z_Sigma); the expected bound is E[. | f(x) = y] (kernels.theory).
  A general Sigma enters Thm 3 only through mu^T w and ||w||_Sigma, which the identity-
  covariance formulas reproduce with ||mu|| -> mu^T w / ||w||_Sigma, ||w|| -> ||w||_Sigma.
* Eigenvalues of the pooled covariance are kept above a relative cut (numpy.matrix_rank's
  d * eps_f32 * lambda_max), not the public code's absolute 1e-6, so units do not matter.
* Finite samples: the representations' classifier is fitted on n samples (the raw reference is
  exact), so the plug-in score is biased against wide representations: with n <= width it is 0
  for any model, and the identity, 1 in the limit, falls with width / n. Beside it, at eps = 0,
  ``score_corrected`` (``corrected_summary``): the same integration with the accuracy and
  expected bound of the Bayes classifier at the unbiased squared Mahalanobis distance, defined
  while n1 + n2 - k - 3 > 0 (``n_for_width`` gives n for a ratio n / width), with its standard
  error ``score_corrected_stderr`` (``corrected_stderr``: parametric resamples of each scale's
  distance from its noncentral F law). The eps > 0 scores have no correction: they carry the
  plug-in's bias against wide representations (measured for the identity:
  ``python -m experiments.bench.synbench --finite_sample --epsilons=0,0.2``).
* Representations wider than the training split (e.g. the identity on image inputs) are
  first projected onto the span of the within-class-centred training rows, the support of the
  pooled covariance (App. C Remark): the same classifier, without a d x d array.

Optional, after scoring (Config.robust_probe, Sec. 4 "Robust linear probing", Tables 6 / 9):
eps = argmax_eps SynBench-Score at ``probe_a_t``, then a standard and an eps-robust linear probe
(lmprobe.methods.robust_probe: 10-step PGD-l2 adversarial training on the INPUT through the
frozen f, as the paper; ``probe_attack="representation"`` attacks f(x)), both reported clean
and under attack. eps keeps the score's convention: relative (eps * ||mu|| of the attacked
space) unless --no_relative_epsilon. * Downstream task: the paper probes CIFAR10; offline, a
labelled class-conditional Gaussian task at ``probe_scale`` drawn from a held-out seed
(seed + DOWNSTREAM_SEED_OFFSET: none of the scored samples), ``probe_n`` train + test samples.
For the identity on isotropic data the answers are closed forms: accuracy Phi(s), robust
accuracy Phi(s (1 - eps)) (relative) or Phi(s - eps) (absolute).

Optional (Config.baselines, App. G, Tables 14 / 15): the loss-data baselines of Whitney et al.
(Val loss, MDL, SDL_1, eSC_1; lmprobe.methods.loss_data, in nats) on the cached train-split
representations of one scale, ``baseline_scale``. * The paper does not say which scale; its
"n = length of the synthetic data set" is one task's n samples (eSC > floor(0.9 n) in Table 14).

The package: ``config`` (Config, constants), ``representations`` (the networks f, and by name),
``theory`` (closed forms and the score's integration), ``run`` (one representation, end to end).
"""

from lmprobe.methods.synbench.config import (
    CACHE_VERSION,
    CEILING_BATCH,
    CURVE_GRID,
    DEFAULT_INPUT_SCALES,
    DEFAULT_N_RATIO,
    DEFAULT_SEQ_LEN,
    DOWNSTREAM_SEED_OFFSET,
    EMBEDDING_SAMPLE,
    INPUTS,
    MAX_N,
    NORMS,
    PAPER_EPSILONS,
    PAPER_THRESHOLDS,
    STDERR_DRAWS,
    Config,
)
from lmprobe.methods.synbench.representations import (
    FUNCTION,
    FUNCTION_INPUT_SHAPE,
    IDENTITY,
    KINDS,
    LANGUAGE_MODEL,
    PROJECTION_DIM,
    RANDOM_PROJECTION,
    VIT,
    Representation,
    balanced_signs,
    embedding_moments,
    function_representation,
    identity_representation,
    import_function,
    load_representation,
    padded,
    random_projection_representation,
    representation_kind,
    scorer_representation,
    signal_fraction_representation,
    token_embedding_rms,
    vit_checkpoint_representation,
    vit_representation,
)
from lmprobe.methods.synbench.run import (
    CorrectedSummary,
    Result,
    baseline_metrics,
    ceiling,
    check_representations,
    check_sample_size,
    corrected_stderr,
    corrected_summary,
    downstream_task,
    input_scale_sweep,
    mean_difference_norms,
    n_for_width,
    represent,
    representation_summary,
    robust_linear_probing,
    run,
    squared_distances,
    threshold_curves,
)
from lmprobe.methods.synbench.theory import (
    Reference,
    bayes_accuracy_bound,
    check_reference,
    eps0_scores,
    population_scores,
    raw_reference,
    synbench_scores,
    unbiased_squared_distance,
)

__all__ = [
    "CACHE_VERSION",
    "CEILING_BATCH",
    "CURVE_GRID",
    "Config",
    "CorrectedSummary",
    "DEFAULT_INPUT_SCALES",
    "DEFAULT_N_RATIO",
    "DEFAULT_SEQ_LEN",
    "DOWNSTREAM_SEED_OFFSET",
    "EMBEDDING_SAMPLE",
    "FUNCTION",
    "FUNCTION_INPUT_SHAPE",
    "IDENTITY",
    "INPUTS",
    "KINDS",
    "LANGUAGE_MODEL",
    "MAX_N",
    "NORMS",
    "PAPER_EPSILONS",
    "PAPER_THRESHOLDS",
    "PROJECTION_DIM",
    "RANDOM_PROJECTION",
    "Reference",
    "Representation",
    "Result",
    "STDERR_DRAWS",
    "VIT",
    "balanced_signs",
    "baseline_metrics",
    "bayes_accuracy_bound",
    "ceiling",
    "check_reference",
    "check_representations",
    "check_sample_size",
    "corrected_stderr",
    "corrected_summary",
    "downstream_task",
    "embedding_moments",
    "eps0_scores",
    "function_representation",
    "identity_representation",
    "import_function",
    "input_scale_sweep",
    "load_representation",
    "mean_difference_norms",
    "n_for_width",
    "padded",
    "population_scores",
    "random_projection_representation",
    "raw_reference",
    "represent",
    "representation_kind",
    "representation_summary",
    "robust_linear_probing",
    "run",
    "scorer_representation",
    "signal_fraction_representation",
    "squared_distances",
    "synbench_scores",
    "threshold_curves",
    "token_embedding_rms",
    "unbiased_squared_distance",
    "vit_checkpoint_representation",
    "vit_representation",
]
