"""docs/findings.md's validate findings, re-tested with today's statistics from the published values.

    python -m experiments.bench.findings_statistics

The runs behind those findings (encoders, SmolLM2's noise ladder, four base decoders) printed each
number as value ± standard error; their run directories are not kept, so this recomputes from
those printed values: ladder trends with the exact one-sided p in the stated direction, Holm
across the proxies of a ladder, the power of each test; pairs and ladder steps resolved by t tests
on each error's degrees of freedom (SynTextBench: 3 trials, 2; the others: bootstraps over
examples, normal) with Holm across the pairs of a table, beside the old rule (|difference| > 1.96
combined standard errors, no correction). Values are rounded as printed, so a pair at the edge
may differ from what the full-precision run would give.
"""

from __future__ import annotations

import math

import numpy as np

from lmprobe.report import correlation, significance

TRIALS_DF = 2  # SynTextBench: mean of 3 trials
NOISE = (0.0, 0.05, 0.1, 0.2, 0.4)
# SmolLM2-135M's weight-noise ladder (name: (values along the ladder, standard errors, lower is better, proxy))
DECODER_LADDER = {
    "syntextbench": ((0.073, 0.046, 0.037, 0.054, 0.048), (0.037, 0.022, 0.009, 0.014, 0.022), False, True),
    "byod_negation_normalized": ((-0.28, -0.34, -0.45, -1.37, -1.44), (0.09, 0.09, 0.08, 0.18, 0.35), False, True),
    "byod_negation": ((0.084, 0.015, -0.079, -0.238, 0.109), (0.041, 0.043, 0.050, 0.113, 0.235), False, True),
    "byod_tokenization": ((0.182, 0.179, 0.187, 0.437, 0.599), (0.017, 0.019, 0.018, 0.026, 0.031), True, True),
    "byod_long_range": ((0.192, 0.177, 0.160, 0.487, 0.645), (0.012, 0.012, 0.010, 0.012, 0.007), False, True),
    "byod_word_order": ((0.027, 0.032, 0.038, 0.319, 0.670), (0.006, 0.004, 0.007, 0.039, 0.005), False, True),
    "byod_word_order_net": ((-0.144, -0.138, -0.145, -0.122, -0.021), (0.014, 0.015, 0.016, 0.029, 0.024), False,
                            True),
    "probe_rt_polarity": ((0.736, 0.645, 0.535, 0.545, 0.530), (0.030, 0.034, 0.036, 0.034, 0.036), False, False),
    "zero_shot_rt_polarity": ((0.757, 0.607, 0.512, 0.484, 0.458), (0.044, 0.032, 0.012, 0.027, 0.033), False,
                              False),
    "heldout_bits_per_byte": ((1.387, 1.489, 1.826, 3.956, 6.505), (0.036, 0.038, 0.043, 0.114, 0.125), True, False),
}
# the minilm-l6 noise ladder (0, 0.02, 0.05, 0.1), and mpnet-base, nomic-embed-v1.5
ENCODERS = ("minilm-l6", "@noise=0.02", "@noise=0.05", "@noise=0.1", "mpnet-base", "nomic-embed-v1.5")
ENCODER_NUMBERS = {
    "syntextbench": ((0.062, 0.050, 0.056, 0.053, 0.144, 0.142), (0.010, 0.010, 0.006, 0.009, 0.010, 0.011)),
    "probe_rt_polarity": ((0.634, 0.654, 0.669, 0.692, 0.808, 0.790), (0.024, 0.024, 0.024, 0.024, 0.019, 0.020)),
    "probe_tweets": ((0.592, 0.593, 0.608, 0.620, 0.662, 0.692), (0.027, 0.027, 0.027, 0.027, 0.025, 0.026)),
}
# four base decoders: smollm2-135m, gemma3-270m, qwen2.5-coder-0.5b, qwen2.5-coder-1.5b
DECODERS = ("smollm2-135m", "gemma3-270m", "qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b")
DECODER_NUMBERS = {
    "syntextbench": ((0.073, 0.063, 0.088, 0.116), (0.037, 0.025, 0.029, 0.024)),
    "probe_rt_polarity": ((0.736, 0.786, 0.675, 0.835), (0.030, 0.027, 0.033, 0.026)),
    "zero_shot_rt_polarity": ((0.757, 0.605, 0.779, 0.830), (0.044, 0.032, 0.045, 0.041)),
    "zero_shot_tweets": ((0.395, 0.350, 0.465, 0.621), (0.044, 0.012, 0.034, 0.053)),
    "heldout_bits_per_byte": ((1.387, 1.236, 1.636, 1.141), (0.036, 0.038, 0.064, 0.035)),
}


def _df(name: str, n: int) -> list:
    return [TRIALS_DF] * n if name == "syntextbench" else [None] * n


def old_rule(values, errors) -> int:
    """Pairs with |difference| > 1.96 combined standard errors, uncorrected (the rule before)."""
    return sum(abs(values[i] - values[j]) > 1.959964 * math.hypot(errors[i], errors[j])
               for i in range(len(values)) for j in range(i + 1, len(values)))


def old_steps(values, errors) -> int:
    return sum(abs(values[i] - values[i + 1]) > 1.959964 * math.hypot(errors[i], errors[i + 1])
               for i in range(len(values) - 1))


def ladder_lines() -> list[str]:
    values = {name: v for name, (v, _, _, _) in DECODER_LADDER.items()}
    errors = {name: e for name, (_, e, _, _) in DECODER_LADDER.items()}
    lower = {name for name, (_, _, low, _) in DECODER_LADDER.items() if low}
    proxies = [name for name, (*_, proxy) in DECODER_LADDER.items() if proxy]
    rows = correlation.ladder_table({"smollm2-135m @noise": (list(range(5)), correlation.FALLS)}, values,
                                    lower_is_better=lower, stderr=errors,
                                    df={n: _df(n, 5) for n in values}, family=proxies)
    out = ["SmolLM2-135M noise ladder (n = 5; one-sided exact p in the stated direction; Holm across "
           f"the {len(proxies)} proxies; power at alpha 0.05 for r = 0.5 / 0.7 / 0.9)",
           "| number | tau | two-sided p (before) | one-sided p | Holm p | power | steps resolved: before -> after |",
           "|---|---|---|---|---|---|---|"]
    for row in rows:
        name = row["name"]
        signed = np.array(values[name]) * (-1 if name in lower else 1) * -1
        before = significance.trend(signed)["p"]
        power = "/".join(f"{v:.2f}" for v in row["power"].values())
        holm = f"{row['p_adjusted']:.3f}" if row["p_adjusted"] is not None else "(task)"
        out.append(f"| {name} | {row['tau']:+.2f} | {before:.3f} | {row['p']:.4f} | {holm} | {power} | "
                   f"{old_steps(values[name], errors[name])} -> {row['resolved_steps']['n_resolved']} of 4 |")
    return out


def pair_lines(title: str, models, numbers) -> list[str]:
    out = [title, "| number | pairs | old rule (z 1.96, uncorrected) | t on its df, Holm |", "|---|---|---|---|"]
    for name, (v, e) in numbers.items():
        got = significance.resolved_pairs(v, e, df=_df(name, len(v)))
        out.append(f"| {name} | {got['n_pairs']} | {old_rule(v, e)} | {got['n_resolved']} |")
    return out


def main() -> None:
    lines = ladder_lines() + [""]
    lines += pair_lines("Encoders (minilm-l6 ladder, mpnet-base, nomic-embed-v1.5): pairs resolved", ENCODERS,
                        ENCODER_NUMBERS) + [""]
    lines += pair_lines("Four base decoders: pairs resolved", DECODERS, DECODER_NUMBERS) + [""]
    lines.append("Power of the exact Kendall test, two-sided, alpha 0.05 (one-sided in brackets):")
    for n in (4, 5, 9):
        two = "/".join(f"{significance.power(n, r, alternative='two-sided'):.2f}" for r in (0.5, 0.7, 0.9))
        one = "/".join(f"{significance.power(n, r):.2f}" for r in (0.5, 0.7, 0.9))
        lines.append(f"  n = {n}: r = 0.5 / 0.7 / 0.9: {two} ({one})")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
