"""Pure JAX numerics of the five methods, with no knowledge of models or text.

divergence  KL, JSD, entropy, L1, cosine, log-prob gathers and token-set mass from logits,
            chunked over the vocabulary (BYOD, SCoPE)
moments     per-class means and covariances, pooled covariance, spectra
whitening   class-wise energy-truncated whitening of SynTextBench (Sec. 2.3)
robust      z_Sigma of the epsilon-robust Bayes classifier: l2 closed form, l_p (SynBench)
bayes       linear classifiers' decisions and margins; SynTextBench and SynBench pipelines
theory      Thm 1 / Thm 3 accuracy and expected scaled bound (SynBench)
integrals   goodness function / E(a_t) and their exact areas; SynTextBench and SynBench scores
selection   best valid candidate per example for greedy perturbation search (SCoPE)
logistic    multinomial L2 logistic regression (sklearn's objective), C by k-fold CV (SentEval probes)

Labels are +1 / -1 with 0 marking padding; leading axes are batch axes (tasks, scales).
"""

from lmprobe.kernels.bayes import (
    GaussianClassModel,
    LinearMargins,
    MarginSummary,
    fit_gaussian_classes,
    linear_margins,
    summarize_margins,
    synbench_accuracy_bound,
    syntextbench_accuracy_margin,
)
from lmprobe.kernels.divergence import (
    DEFAULT_CHUNK_SIZE,
    cosine_similarity,
    entropy,
    js_divergence,
    kl_divergence,
    l1_distance,
    token_log_probs,
    token_set_log_mass,
    token_set_mass,
)
from lmprobe.kernels.integrals import (
    synbench_score,
    syntextbench_score,
    threshold_curve,
    threshold_curve_area,
)
from lmprobe.kernels.logistic import (
    SENTEVAL_CS,
    CrossValidation,
    LogisticModel,
    cross_validate,
    cross_validated_c,
    stratified_folds,
)
from lmprobe.kernels.moments import (
    ClassMoments,
    class_means,
    class_moments,
    descending_eigh,
    in_sequence,
    in_sequence_on_tpu,
    numerical_support,
    pooled_covariance,
    symmetric_eigh,
)
from lmprobe.kernels.robust import (
    RobustDirection,
    dual_exponent,
    project_onto_ball,
    robust_direction,
    robust_direction_lp,
)
from lmprobe.kernels.selection import Selection, select_best_candidate
from lmprobe.kernels.theory import (
    expected_scaled_bound,
    gaussian_accuracy,
    imbalanced_accuracy,
    imbalanced_expected_scaled_bound,
    robust_accuracy,
)
from lmprobe.kernels.whitening import (
    DEFAULT_ENERGY,
    ClassWhitening,
    apply_class_whitening,
    energy_rank,
    fit_class_whitening,
    whitening_transform,
)

__all__ = [
    "DEFAULT_CHUNK_SIZE",
    "DEFAULT_ENERGY",
    "ClassMoments",
    "ClassWhitening",
    "CrossValidation",
    "GaussianClassModel",
    "LinearMargins",
    "LogisticModel",
    "MarginSummary",
    "RobustDirection",
    "SENTEVAL_CS",
    "Selection",
    "apply_class_whitening",
    "class_means",
    "class_moments",
    "cosine_similarity",
    "cross_validate",
    "cross_validated_c",
    "descending_eigh",
    "dual_exponent",
    "energy_rank",
    "entropy",
    "expected_scaled_bound",
    "fit_class_whitening",
    "fit_gaussian_classes",
    "gaussian_accuracy",
    "imbalanced_accuracy",
    "imbalanced_expected_scaled_bound",
    "in_sequence",
    "in_sequence_on_tpu",
    "js_divergence",
    "kl_divergence",
    "l1_distance",
    "linear_margins",
    "numerical_support",
    "pooled_covariance",
    "project_onto_ball",
    "robust_accuracy",
    "robust_direction",
    "robust_direction_lp",
    "select_best_candidate",
    "stratified_folds",
    "summarize_margins",
    "synbench_accuracy_bound",
    "synbench_score",
    "symmetric_eigh",
    "syntextbench_accuracy_margin",
    "syntextbench_score",
    "threshold_curve",
    "threshold_curve_area",
    "token_log_probs",
    "token_set_log_mass",
    "token_set_mass",
    "whitening_transform",
]
