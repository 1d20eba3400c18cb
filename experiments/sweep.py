"""`python -m experiments.sweep`: the front end `lmprobe sweep` (lmprobe.cli.sweep)."""
from lmprobe.cli.__main__ import script

script("sweep", __name__)
