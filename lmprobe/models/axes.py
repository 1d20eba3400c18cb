"""Logical axis names of parameters, defined once.

Every parameter carries a tuple of these (None: an axis no rule shards); the engine's rules table
(lmprobe.engine.mesh) maps them to mesh axes. Attention kernels keep heads as their own dimension,
[embed, heads, head_dim] and [heads, head_dim, embed], so that sharding 'heads' never cuts a head.
"""

VOCAB = "vocab"
EMBED = "embed"
HEADS = "heads"  # query heads
KV_HEADS = "kv_heads"  # key/value heads (fewer than HEADS with grouped-query attention)
HEAD_DIM = "head_dim"
MLP = "mlp"
LAYERS = "layers"  # the leading axis of stacked (scanned) layer parameters
POSITIONS = "positions"  # rows of learned position-embedding tables

# Activations
BATCH = "batch"  # sequences of a batch
LENGTH = "length"  # positions of a sequence
