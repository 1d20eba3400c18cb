"""`python -m experiments.scope`: the front end `lmprobe scope` (lmprobe.cli.scope)."""
from lmprobe.cli.__main__ import script

script("scope", __name__)
