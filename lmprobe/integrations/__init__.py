"""Bridges from other tools to lmprobe's engine (optional extras, imported by name only):

lm_eval  lmprobe as an lm-evaluation-harness backend, model ``lmprobe`` (``pip install "lmprobe[lm_eval]"``)
"""
