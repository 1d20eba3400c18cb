"""`python -m experiments.syntextbench`: the front end `lmprobe syntextbench` (lmprobe.cli.syntextbench)."""
from lmprobe.cli.__main__ import script

script("syntextbench", __name__)
