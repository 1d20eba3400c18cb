"""Bridges from other tools to lmprobe's engine (optional extras, imported by name only):

lm_eval  lmprobe as an lm-evaluation-harness backend, model ``lmprobe`` (``pip install -e ".[lm_eval]"``)
"""

import importlib.util
import sys

LM_EVAL_MISSING = ('lmprobe.integrations.lm_eval needs lm-evaluation-harness: pip install -e ".[lm_eval]" '
                   "in the lmprobe checkout")


def lm_eval_main(argv=None) -> int:
    """The ``lmprobe-lm-eval`` command: lm-eval's command line with the ``lmprobe`` model; without
    lm-eval installed, one line saying how to install it (exit status 2)."""
    if importlib.util.find_spec("lm_eval") is None:
        print(f"error: {LM_EVAL_MISSING}", file=sys.stderr)
        return 2
    from lmprobe.integrations.lm_eval import main

    return main(argv) or 0
