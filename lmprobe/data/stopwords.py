"""The stop-word list printed in the SynTextBench paper, Appendix A.6, transcribed exactly.

A.6 prints 284 entries in two brace groups (87 + 197); 13 of them repeat ('m', 're', 's',
'll', 've', 'd': contraction pieces such as "'re" / "’re" with the apostrophe lost), leaving 271
distinct words. The paper's "removing 284 stop words" (Sec 2.2, Discussions) counts the printed
entries. Negations ('not', 'no', 'never', ...) are not in the list.

How the paper uses it (A.2, A.5, Sec 2.2 Discussions): stop words are removed from real
sentences (the product-review grammar check; the English Wikipedia sentence lengths of A.5,
which the synthetic length profile, i.e. p_e, is compared with) and added to an LM's
vocabulary in the LM-generated variant of A.2. The paper does NOT say that stop words are
removed from the SentiWordNet word lists: its counts (23147 / 26440 / 154993) are reproduced
without removal (see lexicons.py), so word_lists() keeps them and remove_stopwords() is offered
to callers that want stop-word-free lists or corpora.

Other methods name their list through ``STOP_LISTS`` / ``stop_list``: 'a6' (this list, the
default of the functions below, SynTextBench's) and 'nltk' (NLTK's 179 English stop words,
nltk_stopwords.py; the SCoPE reference's, lmprobe.perturb.constraints' default).
"""

from __future__ import annotations

from collections.abc import Iterable

from lmprobe.data.nltk_stopwords import ENGLISH as NLTK_STOP_WORDS
from lmprobe.errors import LmprobeError

# Appendix A.6 as printed, in order, repeats included (two groups: 87 and 197 entries).
PRINTED = tuple("""
    must meanwhile among same you formerly already take he thereupon done anyhow almost ca
    regarding will mostly say again forty seemed still they re seem latter why hers thereby
    themselves your nine become may beyond it back our himself m via we seems throughout
    yourself bottom only whereby move else front within after every quite hereby now since
    became herself behind any those used indeed ve first moreover ourselves she should her
    various few hundred whoever give latterly between in most make sixty therefore s hence
    amount
""".split()) + tuple("""
    otherwise m re s are could along ours of that everywhere during his then fifty namely
    when around all keep these ll third being thus more s is where further them towards next
    and a does here ten whom except myself somehow ever enough there mine other so hereupon
    who eight one hereafter amongst seeming its each sometime this me ll until him because
    many anyway part from have over to re becomes too as name whence whole herein everything
    against call upon both i whenever across anywhere six us thereafter also former whither
    whose such really was d someone ve eleven wherein yours by their beside or re has off
    which put whether per four whereafter often doing had out some fifteen others once
    somewhere either besides though been do very thru go please sometimes ll perhaps
    whereupon whatever about for itself thence at how made three might another did alone
    elsewhere toward were would due what an wherever be can something side d with m am
    therein into through ve everyone on my even own see several two afterwards show d
    beforehand nowhere becoming last onto the yourselves five anyone together before always
    get using
""".split())

STOP_WORDS: frozenset[str] = frozenset(PRINTED)  # 271 distinct words

STOP_LISTS = ("a6", "nltk")  # SynTextBench A.6 (this module); NLTK English (nltk_stopwords.py)


def stop_list(name: str = "a6") -> frozenset[str]:
    """The named stop-word list (lower case): 'a6' or 'nltk' (module docstring)."""
    if name == "a6":
        return STOP_WORDS
    if name == "nltk":
        return NLTK_STOP_WORDS
    raise LmprobeError(f"unknown stop-word list '{name}': use one of {', '.join(STOP_LISTS)}")


def is_stopword(word: str, name: str = "a6") -> bool:
    """Whether a word (any case; a typographic apostrophe counts as ') is in the named list,
    A.6 by default."""
    return word.lower().replace("\u2019", "'") in stop_list(name)


def remove_stopwords(words: Iterable[str]) -> list[str]:
    """The words that are not A.6 stop words (case-insensitive), order kept."""
    return [w for w in words if w.lower() not in STOP_WORDS]
