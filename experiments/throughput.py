"""`python -m experiments.throughput`: the front end `lmprobe throughput` (lmprobe.cli.throughput)."""
from lmprobe.cli.__main__ import script

script("throughput", __name__)
