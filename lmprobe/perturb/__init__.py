"""Text transformations: small pure functions of (text[, rng]) -> text, None where the
transformation does not apply. BYOD (Jain et al., arXiv:2306.13651): negation (negation.py), trigger append,
word swaps and context replacement (text.py), chopped tokenization (tokenization.py)."""
