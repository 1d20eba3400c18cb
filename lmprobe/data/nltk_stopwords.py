"""NLTK's English stop-word list, the one the SCoPE reference code filters with (Rawal & Toneva, arXiv:2311.04166v1
Sec. 3.2 "constrain modifications of words that are stopwords"; the reference calls
``nltk.corpus.stopwords.words("english")``), shipped as data so nothing is downloaded at run time.

Source: the ``english`` file of the nltk_data ``stopwords`` corpus (corpora/stopwords.zip),
the 179-word version of the SCoPE paper's time (TextAttack 0.3.8; later nltk_data releases
add more contractions such as "he'd", "i'm", "they're"), transcribed in the file's order.
nltk_data's README says the lists come from PostgreSQL's copy of the Snowball project's stop
lists (src/backend/snowball/stopwords/english.stop; Snowball is BSD-3-Clause licensed), the
English one extended by NLTK with contractions and their apostrophe-less pieces ("don",
"mightn", ...; nltk_data issue 22). A plain list of function words, kept as data.

Unlike SynTextBench's A.6 list (stopwords.py) it keeps content-ish verbs and adverbs such as
"make", "give", "really", "show" modifiable, and it blocks negations ("not", "no", "nor") and
contractions ("don't", "isn't").
"""

from __future__ import annotations

ENGLISH_ORDERED: tuple[str, ...] = tuple("""
    i me my myself we our ours ourselves you you're you've you'll you'd your yours yourself
    yourselves he him his himself she she's her hers herself it it's its itself they them their
    theirs themselves what which who whom this that that'll these those am is are was were be
    been being have has had having do does did doing a an the and but if or because as until
    while of at by for with about against between into through during before after above below
    to from up down in out on off over under again further then once here there when where why
    how all any both each few more most other some such no nor not only own same so than too
    very s t can will just don don't should should've now d ll m o re ve y ain aren aren't
    couldn couldn't didn didn't doesn doesn't hadn hadn't hasn hasn't haven haven't isn isn't ma
    mightn mightn't mustn mustn't needn needn't shan shan't shouldn shouldn't wasn wasn't weren
    weren't won won't wouldn wouldn't
""".split())

ENGLISH: frozenset[str] = frozenset(ENGLISH_ORDERED)  # 179 distinct words
