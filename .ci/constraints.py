"""Print constraints.txt from this environment: the exact version of every package that lmprobe
and its `test` and `lm_eval` extras pull in, as installed here (where the suite just passed).

    pip install -e ".[test]" -c constraints.txt && python -m pytest     # passes
    python .ci/constraints.py > constraints.txt                        # after a tested upgrade
"""

import importlib.metadata as md
import re

from packaging.markers import default_environment
from packaging.requirements import Requirement

HEADER = """\
# The versions CI tested: README's commands and .ci/run install with `-c constraints.txt`, so a fresh
# install gets what CI passed. Regenerate after a tested upgrade: python .ci/constraints.py > constraints.txt
"""


def _key(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def closure(root: str, extras: tuple[str, ...]) -> dict[str, tuple[str, str]]:
    """{normalised name: (name, version)} of ``root`` and every installed requirement under it."""
    found: dict[str, tuple[str, str]] = {}

    def walk(name: str, extras: tuple[str, ...]) -> None:
        try:
            dist = md.distribution(name)
        except md.PackageNotFoundError:  # a requirement for another platform
            return
        first = _key(name) not in found
        found.setdefault(_key(name), (dist.metadata["Name"], dist.version))
        for text in dist.requires or ():
            req = Requirement(text)
            wanted = req.marker is None or any(
                req.marker.evaluate({**default_environment(), "extra": e}) for e in ("", *extras))
            if wanted and (first or extras):
                walk(req.name, tuple(req.extras))

    walk(root, extras)
    found.pop(_key(root))
    return found


if __name__ == "__main__":
    print(HEADER, end="")
    for name, version in sorted(closure("lmprobe-jax", ("test", "lm_eval")).values(), key=lambda nv: _key(nv[0])):
        print(f"{name}=={version.split('+')[0]}")  # torch 2.13.0+cpu: ==2.13.0 matches any local build
