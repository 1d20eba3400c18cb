"""Text-side data: sentiment lexicons and their word lists (lexicons), the WordNet database
(wordnet), the SynTextBench stop-word list (stopwords) and synthetic sentences (synthetic)."""
