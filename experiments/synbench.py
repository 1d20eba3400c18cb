"""`python -m experiments.synbench`: the front end `lmprobe synbench` (lmprobe.cli.synbench)."""
from lmprobe.cli.__main__ import script

script("synbench", __name__)
