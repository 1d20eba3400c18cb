"""`python -m experiments.mstemp`: the front end `lmprobe mstemp` (lmprobe.cli.mstemp)."""
from lmprobe.cli.__main__ import script

script("mstemp", __name__)
