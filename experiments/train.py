"""`python -m experiments.train`: the front end `lmprobe train` (lmprobe.cli.train)."""
from lmprobe.cli.__main__ import script

script("train", __name__)
