"""Command-line front ends: `python -m experiments.<name> --flag=value`."""
