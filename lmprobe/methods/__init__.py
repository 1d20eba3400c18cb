"""Evaluation methods, one module (or package) each: a pipeline from inputs to a typed result.

``syntextbench`` (000), ``byod`` (001), ``scope`` (002), ``synbench`` (003), ``mstemp`` (004);
``icl``: in-context-learning accuracy; ``loss_data``: the loss-data baselines (Val loss, MDL,
SDL, eSC) SynTextBench compares against; ``robust_probe``: SynBench's eps-robust linear probing.
"""
