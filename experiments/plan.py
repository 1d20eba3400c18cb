"""`python -m experiments.plan`: the front end `lmprobe plan` (lmprobe.cli.plan)."""
from lmprobe.cli.__main__ import script

script("plan", __name__)
