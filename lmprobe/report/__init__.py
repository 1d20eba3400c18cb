"""What a run leaves behind and how its scores are compared with real-task results.

artifacts    run-directory files written atomically; cached arrays that make reruns resume
correlation  Pearson / Spearman across models, with the paper's sign convention for
             lower-is-better metrics (Tables 1, 3, 7, 9) and its robustness-accuracy rank
             aggregation (Sec. 3.2 "Robustness implications", Appendix A.12, Table 2); the
             proxy-vs-task and ladder tables
coefficients Pearson / Spearman / Kendall tau-b, one pair or many rows at once
significance exact permutation p-values, critical values, trends, outliers, resolved pairs
"""
