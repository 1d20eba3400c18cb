"""What every family promises: a name for each parameter, its kind, and the interface of its kind."""

import inspect

import pytest

from lmprobe.models import CAUSAL_LM, ENCODER, ENCODER_DECODER, FAMILIES, HF, HFNames, family_of
from lmprobe.models.base import CausalLM, Encoder, EncoderDecoder


def test_names_follow_module_paths_with_only_renames_listed():
    names = HFNames("model.", {"layers": "model.layers.{i}", "lm_head": "lm_head",
                               "layers.attn.q_proj.kernel": HF("fused.weight", qkv=0)})
    assert names("embed_tokens.embedding") == HF("model.embed_tokens.weight")
    assert names("layers.attn.k_proj.kernel") == HF("model.layers.{i}.attn.k_proj.weight", transpose=True)
    assert names("layers.attn.k_proj.bias") == HF("model.layers.{i}.attn.k_proj.bias")
    assert names("layers.attn.q_proj.kernel") == HF("fused.weight", qkv=0)  # the longest key wins
    assert names("lm_head.kernel") == HF("lm_head.weight", transpose=True)
    assert names("norm.weight") == HF("model.norm.weight")
    assert HFNames("transformer.", conv1d=True)("h.c_fc.kernel") == HF("transformer.h.c_fc.weight")


def test_rule_for_a_module_is_refused():
    with pytest.raises(AssertionError, match="names a module"):
        HFNames("", {"attn": HF("x.weight")})("attn.q.kernel")


@pytest.mark.parametrize("model_type", sorted(FAMILIES))
def test_family_kind_matches_its_interface(model_type):
    family = FAMILIES[model_type]
    assert not (family.is_decoder and family.is_encoder_decoder)
    protocol = CausalLM if family.is_decoder else EncoderDecoder if family.is_encoder_decoder else Encoder
    assert family.kind == {CausalLM: CAUSAL_LM, EncoderDecoder: ENCODER_DECODER, Encoder: ENCODER}[protocol]
    methods = [m for m in ("embed", "logits", "encode", "decode") if hasattr(protocol, m)]
    if not getattr(family.model, "takes_text", True):  # ViT: pixels in, no token embedding
        methods.remove("embed")
    for method in methods:
        assert callable(getattr(family.model, method, None)), f"{family.name} lacks {method}"
    call = inspect.signature(family.model.__call__).parameters
    if family.is_decoder:
        for arg in ("cache", "cache_index", "positions", "compute_logits", "output_hidden_states"):
            assert arg in call, f"{family.name}.__call__ lacks {arg}"
    elif not family.is_encoder_decoder:
        assert "cache" not in call and "output_hidden_states" in call


@pytest.mark.parametrize("model_type", sorted(FAMILIES))
def test_family_of_a_built_model(model_type):
    family = FAMILIES[model_type]
    fake = object.__new__(family.model)
    assert family_of(fake).model is family.model
    assert family_of(object()) is None
