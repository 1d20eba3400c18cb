"""Measuring models and checkpoints over the stage registry (lmprobe.methods.stages): below the
front ends, the in-loop callback and report (which compares, tests and draws what is measured),
above the methods.

measure  one model's record for validate: its entry (a name, a variant on a ladder, a training
         run's checkpoint) and every stage's numbers with their errors
sweep    every checkpoint of a training run, one row per step: discovery and watching, scoring
         through the stages with failures as rows, resumption from cached rows

FALLS, RISES: how quality moves along a ladder's known order (falls with noise or layers dropped,
rises with training steps), as entries record it and lmprobe.report.correlation.ladder_table reads it.
"""

FALLS, RISES = "falls", "rises"
