"""BYOD's negation transform (Sec. 4, "Au Contraire"): place "not" after the first occurrence of
is / was / were, provided the sentence is not already negated.

* First BY POSITION, whole word, any case ("Was it ..." -> "Was not it ..."; the paper keeps
  its rule even where English would move "not", cf. its Table 1 "A sterlet is not what type of
  creature?"). The reference code instead tries " is ", then " was ", " are ", " were " in that
  priority order and also uses "are": not the paper's rule, not followed here.
* "not" copies the verb's case only when the verb is all capitals ("IS" -> "IS NOT").
* Contractions: "'s" / "'re" are never treated as is / are ("it's" may be "it has", "John's" a
  possessive), so "It's red" has no is/was/were and gives None. A contracted negation
  ("isn't", "wasn't", "don't", "can't", any word ending in n't / n’t) counts as already negated.
* Already negated: any whole word in NEGATIONS (case-insensitive) or ending in n't.
"""

from __future__ import annotations

from lmprobe.perturb.text import WORD

NEGATIONS = frozenset({
    "not", "no", "never", "nor", "neither", "none", "nobody", "nothing", "nowhere", "cannot",
    "nope", "naught", "nought",
})
COPULAS = ("is", "was", "were")


def is_negated(sentence: str) -> bool:
    """Whether the sentence already holds a negation word (NEGATIONS) or an n't contraction."""
    for match in WORD.finditer(sentence):
        word = match.group().lower().replace("’", "'")
        if word in NEGATIONS or word.endswith("n't"):
            return True
    return False


def negate(sentence: str) -> str | None:
    """The sentence with " not" after its first is/was/were; None when it has none of them or
    is already negated. "April is the fourth month ..." -> "April is not the fourth month ..."."""
    if is_negated(sentence):
        return None
    for match in WORD.finditer(sentence):
        verb = match.group()
        if verb.lower() in COPULAS:
            negation = " NOT" if verb.isupper() else " not"
            return sentence[:match.end()] + negation + sentence[match.end():]
    return None
