"""ViT family: vision transformers (google/vit-*, DINO ViTs saved as ViTModel).

Mirrors transformers' modeling_vit.py: the image is cut into patches by a stride-P convolution,
a learned [CLS] token is put in front and learned position embeddings are added (no
interpolation: the model takes only its training resolution); then pre-norm blocks
(LayerNorm, self-attention over all patches, residual; LayerNorm, MLP, residual), a final
LayerNorm and, in ViTModel checkpoints that have one, a pooler (dense + tanh over [CLS]).

SynBench (Sec. 4) probes timm ViTs' representations; timm's pre-logits feature of a ViT is the
[CLS] token of the final normed output, ``output.last_hidden_state[:, 0]`` here. Inputs are
normalised pixels, (x - mean) / std with lmprobe.checkpoints.image_processor's ``image_normalization``.
"""

from __future__ import annotations

import dataclasses

import jax.numpy as jnp
from flax import nnx

from lmprobe.errors import LmprobeError
from lmprobe.models.axes import EMBED, HEAD_DIM, HEADS, KV_HEADS, MLP, POSITIONS
from lmprobe.models.base import Family, HFNames, ModelOutput
from lmprobe.models.encoder import run_encoder_blocks
from lmprobe.models.layers import LayerNorm, Linear, Mask, activation, attention, param, stacked


def _pair(x) -> tuple[int, int]:
    return (int(x[0]), int(x[1])) if isinstance(x, (list, tuple)) else (int(x), int(x))


@dataclasses.dataclass(frozen=True)
class ViTConfig:
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    head_dim: int
    image_size: tuple[int, int] = (224, 224)  # (height, width)
    patch_size: tuple[int, int] = (16, 16)
    num_channels: int = 3
    qkv_bias: bool = True
    hidden_act: str = "gelu"
    layer_norm_eps: float = 1e-12
    pooler_output_size: int | None = None  # None: hidden_size
    pooler_act: str = "tanh"
    add_pooling_layer: bool = False  # set by ViT.fit_config when the checkpoint holds a pooler

    @classmethod
    def from_hf(cls, c: dict) -> ViTConfig:
        heads = c.get("num_attention_heads", 12)
        hidden = c.get("hidden_size", 768)
        return cls(
            hidden_size=hidden, intermediate_size=c.get("intermediate_size", 3072),
            num_hidden_layers=c.get("num_hidden_layers", 12), num_attention_heads=heads,
            head_dim=c.get("head_dim") or hidden // heads,
            image_size=_pair(c.get("image_size", 224)), patch_size=_pair(c.get("patch_size", 16)),
            num_channels=c.get("num_channels", 3), qkv_bias=c.get("qkv_bias", True),
            hidden_act=c.get("hidden_act", "gelu"), layer_norm_eps=c.get("layer_norm_eps", 1e-12),
            pooler_output_size=c.get("pooler_output_size") or hidden, pooler_act=c.get("pooler_act", "tanh"))

    @property
    def grid(self) -> tuple[int, int]:
        """Patches per column and per row (HF's convolution drops the remainder pixels)."""
        return self.image_size[0] // self.patch_size[0], self.image_size[1] // self.patch_size[1]


class ViTPatchProjection(nnx.Module):
    """HF's Conv2d(C, D, kernel=stride=P) as one einsum over non-overlapping patches.

    ``kernel`` is torch's weight [D, C, Ph, Pw] with all axes reversed, [Pw, Ph, C, D]: the
    loader's ``transpose`` reads it exactly.
    """

    def __init__(self, cfg: ViTConfig, *, dtype, param_dtype, rngs):
        (ph, pw), d = cfg.patch_size, cfg.hidden_size
        self.kernel = param(rngs, (pw, ph, cfg.num_channels, d), (None, None, None, EMBED), param_dtype)
        self.bias = param(rngs, (d,), (EMBED,), param_dtype, nnx.initializers.zeros)
        self.cfg, self.dtype = cfg, dtype

    def __call__(self, pixel_values):
        (gh, gw), (ph, pw) = self.cfg.grid, self.cfg.patch_size
        b, c = pixel_values.shape[:2]
        x = pixel_values[:, :, :gh * ph, :gw * pw].astype(self.dtype).reshape(b, c, gh, ph, gw, pw)
        y = jnp.einsum("bcypxq,qpcd->byxd", x, self.kernel[...].astype(self.dtype))
        return (y + self.bias[...].astype(self.dtype)).reshape(b, gh * gw, -1)  # row-major, as HF's flatten


class ViTEmbeddings(nnx.Module):
    def __init__(self, cfg: ViTConfig, *, dtype, param_dtype, rngs):
        gh, gw = cfg.grid
        d = cfg.hidden_size
        self.cls_token = param(rngs, (1, 1, d), (None, None, EMBED), param_dtype)
        self.position_embeddings = param(rngs, (1, 1 + gh * gw, d), (None, POSITIONS, EMBED), param_dtype)
        self.patch_embeddings = ViTPatchProjection(cfg, dtype=dtype, param_dtype=param_dtype, rngs=rngs)
        self.dtype = dtype

    def __call__(self, pixel_values):
        patches = self.patch_embeddings(pixel_values)
        cls = jnp.broadcast_to(self.cls_token[...].astype(self.dtype), (patches.shape[0], 1, patches.shape[-1]))
        return jnp.concatenate([cls, patches], axis=1) + self.position_embeddings[...].astype(self.dtype)


class ViTAttention(nnx.Module):
    def __init__(self, cfg: ViTConfig, *, dtype, param_dtype, rngs):
        d, h, hd = cfg.hidden_size, cfg.num_attention_heads, cfg.head_dim
        kw = dict(dtype=dtype, param_dtype=param_dtype, rngs=rngs)
        self.q_proj = Linear(d, (h, hd), axes=(EMBED, HEADS, HEAD_DIM), use_bias=cfg.qkv_bias, **kw)
        self.k_proj = Linear(d, (h, hd), axes=(EMBED, KV_HEADS, HEAD_DIM), use_bias=cfg.qkv_bias, **kw)
        self.v_proj = Linear(d, (h, hd), axes=(EMBED, KV_HEADS, HEAD_DIM), use_bias=cfg.qkv_bias, **kw)
        self.o_proj = Linear((h, hd), d, axes=(HEADS, HEAD_DIM, EMBED), **kw)
        self.scale = hd ** -0.5

    def __call__(self, x, mask):
        q, k, v = self.q_proj(x), self.k_proj(x), self.v_proj(x)
        return self.o_proj(attention(q, k, v, mask, scale=self.scale))


class ViTMLP(nnx.Module):
    def __init__(self, cfg: ViTConfig, *, dtype, param_dtype, rngs):
        kw = dict(dtype=dtype, param_dtype=param_dtype, rngs=rngs)
        self.fc1 = Linear(cfg.hidden_size, cfg.intermediate_size, axes=(EMBED, MLP), **kw)
        self.fc2 = Linear(cfg.intermediate_size, cfg.hidden_size, axes=(MLP, EMBED), **kw)
        self.act = activation(cfg.hidden_act)

    def __call__(self, x):
        return self.fc2(self.act(self.fc1(x)))


class ViTLayer(nnx.Module):
    def __init__(self, cfg: ViTConfig, *, dtype, param_dtype, rngs):
        kw = dict(dtype=dtype, param_dtype=param_dtype, rngs=rngs)
        self.layernorm_before = LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps, **kw)
        self.attention = ViTAttention(cfg, **kw)
        self.layernorm_after = LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps, **kw)
        self.mlp = ViTMLP(cfg, **kw)

    def __call__(self, x, *, mask):
        x = x + self.attention(self.layernorm_before(x), mask)
        return x + self.mlp(self.layernorm_after(x))


class ViTPooler(nnx.Module):
    def __init__(self, cfg: ViTConfig, *, dtype, param_dtype, rngs):
        self.dense = Linear(cfg.hidden_size, cfg.pooler_output_size, axes=(EMBED, None),
                            dtype=dtype, param_dtype=param_dtype, rngs=rngs)
        self.act = activation(cfg.pooler_act)

    def __call__(self, last_hidden_state):
        return self.act(self.dense(last_hidden_state[:, 0]))


class ViT(nnx.Module):
    """Image encoder: ``model(pixel_values [B, C, H, W]) -> ModelOutput``.

    last_hidden_state [B, 1+N, D] is after the final LayerNorm ([CLS] first, then the N patches
    row by row). hidden_states [L+1, B, 1+N, D] follows HF's ViT: the embedding output, then
    each layer's output, the last one *before* the final LayerNorm (unlike the text families).
    """

    takes_text = False  # no tokenizer: checkpoints.load refuses tokenizer=True

    def __init__(self, cfg: ViTConfig, *, dtype=jnp.float32, param_dtype=jnp.float32, rngs: nnx.Rngs):
        kw = dict(dtype=dtype, param_dtype=param_dtype)
        self.config = cfg
        self.embeddings = ViTEmbeddings(cfg, rngs=rngs, **kw)
        self.layers = stacked(lambda r: ViTLayer(cfg, rngs=r, **kw), cfg.num_hidden_layers, rngs)
        self.layernorm = LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps, rngs=rngs, **kw)
        self.pooler = ViTPooler(cfg, rngs=rngs, **kw) if cfg.add_pooling_layer else None

    @staticmethod
    def fit_config(cfg: ViTConfig, has_tensor) -> ViTConfig:
        """The config with a pooler iff the checkpoint has one (ViTModel with add_pooling_layer)."""
        return dataclasses.replace(cfg, add_pooling_layer=has_tensor("vit.pooler.dense.weight"))

    @property
    def image_size(self) -> tuple[int, int]:
        """(height, width) the position embeddings were trained for; the only size accepted."""
        return self.config.image_size

    @property
    def num_channels(self) -> int:
        return self.config.num_channels

    @property
    def hidden_size(self) -> int:
        return self.config.hidden_size

    def check_pixels(self, shape) -> None:
        """Refuse inputs whose shape is not [B, C, H, W] at the model's own size (no interpolation)."""
        want = (self.num_channels, *self.image_size)
        if len(shape) != 4 or tuple(shape[1:]) != want:
            raise LmprobeError(
                f"pixel_values of shape {tuple(shape)} do not fit this ViT, which takes [batch, "
                f"{want[0]}, {want[1]}, {want[2]}] ({want[1]}x{want[2]} images with {want[0]} channels; "
                "position embeddings are not interpolated): resize the images to that size")

    def __call__(self, pixel_values, output_hidden_states=False):
        self.check_pixels(pixel_values.shape)
        h = self.embeddings(pixel_values)
        out, per_layer = run_encoder_blocks(self.layers, h, mask=Mask(None), output_hidden_states=output_hidden_states)
        hidden = None if per_layer is None else jnp.concatenate([h[None], per_layer], axis=0)
        return ModelOutput(self.layernorm(out), hidden)

    def pooled(self, output: ModelOutput):
        """The pooler's output [B, P] (dense + tanh over [CLS]) for checkpoints that have a pooler."""
        if self.pooler is None:
            raise LmprobeError("this ViT checkpoint has no pooler (a ViTForImageClassification, or a ViTModel "
                               "saved without add_pooling_layer): use output.last_hidden_state[:, 0]")
        return self.pooler(output.last_hidden_state)


# Tensor names as saved (checkpoint layout: encoder.layer.N.attention.attention.query, ...);
# transformers 5 renames them to its module names on load.
_L = "vit.encoder.layer.{i}."
FAMILY = Family(
    name="vit",
    config_from_hf=ViTConfig.from_hf,
    model=ViT,
    base_prefix="vit.",
    is_decoder=False,
    hf_names=HFNames("vit.", {
        "embeddings.patch_embeddings": "vit.embeddings.patch_embeddings.projection",
        "layers": _L.rstrip("."),
        "layers.attention.q_proj": _L + "attention.attention.query",
        "layers.attention.k_proj": _L + "attention.attention.key",
        "layers.attention.v_proj": _L + "attention.attention.value",
        "layers.attention.o_proj": _L + "attention.output.dense",
        "layers.mlp.fc1": _L + "intermediate.dense",
        "layers.mlp.fc2": _L + "output.dense",
    }),
)
