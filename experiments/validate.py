"""`python -m experiments.validate`: the front end `lmprobe validate` (lmprobe.cli.validate)."""
from lmprobe.cli.__main__ import script

script("validate", __name__)
