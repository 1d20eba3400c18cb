"""`python -m experiments`: the `lmprobe` command (lmprobe.cli.__main__)."""
import sys

from lmprobe.cli.__main__ import main

if __name__ == "__main__":
    sys.exit(main())
