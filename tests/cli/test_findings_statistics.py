"""experiments.bench.findings_statistics: docs/findings.md's re-tested figures are what it prints."""

from __future__ import annotations

from experiments.bench import findings_statistics


def test_the_readme_figures_come_from_the_script(capsys):
    findings_statistics.main()
    text = capsys.readouterr().out
    # a 5-step ladder: 1/5! one-sided, times 7 proxies under Holm: no proxy can pass 0.05
    assert "| byod_negation_normalized | +1.00 | 0.017 | 0.0083 | 0.058 | 0.16/0.29/0.60 | 1 -> 1 of 4 |" in text
    assert "| byod_word_order | -1.00 | 0.017 | 1.0000 | 1.000 |" in text  # against the stated direction
    assert "| probe_rt_polarity | +0.80 | 0.083 | 0.0417 | (task) | 0.16/0.29/0.60 | 2 -> 0 of 4 |" in text
    assert "| syntextbench | 15 | 8 | 6 |" in text and "| probe_rt_polarity | 6 | 3 | 2 |" in text
    assert "n = 5: r = 0.5 / 0.7 / 0.9: 0.04/0.08/0.24 (0.16/0.29/0.60)" in text
