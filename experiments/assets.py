"""`python -m experiments.assets`: the front end `lmprobe assets` (lmprobe.cli.assets)."""
from lmprobe.cli.__main__ import script

script("assets", __name__)
