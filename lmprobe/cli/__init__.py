"""The command-line front ends, one module per command (``lmprobe COMMAND``; in a checkout also
``python -m experiments.COMMAND``): each parses flags into its method's Config, runs it and prints.
``common`` holds what they share, ``flags`` the parser; ``__main__`` is the ``lmprobe`` command."""
