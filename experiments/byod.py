"""`python -m experiments.byod`: the front end `lmprobe byod` (lmprobe.cli.byod)."""
from lmprobe.cli.__main__ import script

script("byod", __name__)
