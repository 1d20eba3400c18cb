"""Flax NNX model families, looked up by the ``model_type`` of a Hugging Face config; and models
built in memory (``CallableLM``: any JAX callable), which no config names."""

from __future__ import annotations

from lmprobe.errors import CheckpointError
from lmprobe.models import (
    bert,
    callable_lm,
    distilbert,
    gemma3,
    gpt2,
    gpt_neo,
    gpt_neox,
    gptj,
    llama,
    mpnet,
    mpt,
    nomic_bert,
    opt,
    t5,
    vit,
)
from lmprobe.models.base import CAUSAL_LM, ENCODER, ENCODER_DECODER, HF, Family, HFNames, ModelOutput
from lmprobe.models.callable_lm import CallableLM
from lmprobe.models.sizes import check_hf_sizes

# model_type (config.json) -> family
FAMILIES: dict[str, Family] = {
    "bert": bert.FAMILY,
    "roberta": bert.ROBERTA_FAMILY,
    "distilbert": distilbert.FAMILY,
    "gpt2": gpt2.FAMILY,
    "gpt_neo": gpt_neo.FAMILY,
    "gpt_neox": gpt_neox.FAMILY,
    "gptj": gptj.FAMILY,
    "mpt": mpt.FAMILY,
    "opt": opt.FAMILY,
    "llama": llama.FAMILY,
    "mistral": llama.FAMILY,
    "qwen2": llama.FAMILY,
    "gemma3_text": gemma3.FAMILY,
    "vit": vit.FAMILY,
    "mpnet": mpnet.FAMILY,
    "nomic_bert": nomic_bert.FAMILY,
    "t5": t5.FAMILY,
}
IN_MEMORY: tuple[Family, ...] = (callable_lm.FAMILY,)  # families of models built in memory, not read from a config


def family_for(config: dict, *, where: str = "the checkpoint") -> Family:
    """The family that implements ``config['model_type']``, its sizes checked (lmprobe.models.sizes), or
    one clear error naming ``where`` (the checkpoint or config file) and the field."""
    model_type = config.get("model_type")
    if model_type not in FAMILIES:
        raise CheckpointError(
            f"model_type {model_type!r} in the config.json of {where} is not supported; "
            f"supported model types: {', '.join(sorted(FAMILIES))}. Use a model of one of these "
            "architectures, or add a family under lmprobe/models/")
    check_hf_sizes(config, where)
    return FAMILIES[model_type]


def family_of(model) -> Family | None:
    """The family a built model belongs to (by its class); None for other modules (a model wrapped
    with a task head, such as SCoPE's classifier: neither a causal LM nor an encoder-decoder)."""
    return next((f for f in (*FAMILIES.values(), *IN_MEMORY) if type(model) is f.model), None)


__all__ = ["CAUSAL_LM", "ENCODER", "ENCODER_DECODER", "FAMILIES", "IN_MEMORY", "CallableLM", "Family", "HF",
           "HFNames", "ModelOutput", "family_for", "family_of"]
