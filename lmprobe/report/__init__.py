"""How scores are compared, tested and shown: above the methods, used by the front ends (the run
store the methods write through is lmprobe.store; number formatting is lmprobe.text).

correlation  Pearson / Spearman across models, with the paper's sign convention for
             lower-is-better metrics (Tables 1, 3, 7, 9) and its robustness-accuracy rank
             aggregation (Sec. 3.2 "Robustness implications", Appendix A.12, Table 2); the
             proxy-vs-task and ladder tables
coefficients Pearson / Spearman / Kendall tau-b, one pair or many rows at once
significance exact permutation p-values, power, Holm, trends, outliers, resolved pairs, tau's interval
plots        the papers' figures; scope_plots SCoPE's, radar BYOD's
provenance   run_info: what produced a results.json
"""
