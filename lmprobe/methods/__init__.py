"""Evaluation methods, one module each: a pipeline from inputs to a typed result.

``loss_data``: the loss-data baselines (Val loss, MDL, SDL, eSC) that SynTextBench compares
against (000 Sec. 3.1, Tables 1-2, 7, 9).
"""
