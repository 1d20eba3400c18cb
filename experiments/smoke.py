"""`python -m experiments.smoke`: the front end `lmprobe smoke` (lmprobe.cli.smoke)."""
from lmprobe.cli.__main__ import script

script("smoke", __name__)
