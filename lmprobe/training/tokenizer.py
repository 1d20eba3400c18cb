"""The run's tokenizer: a byte-level BPE trained on the training text with the ``tokenizers`` library
(saved as a transformers PreTrainedTokenizerFast, so that lmprobe's Scorer reads it from the
checkpoint), or an existing one: an embedded model's (``smollm2-135m``) or a tokenizer directory.

Neither adds special tokens to a text; documents are joined with the end-of-text token for training.
"""

from __future__ import annotations

import os
import shutil

from lmprobe.checkpoints.embedded import embedded_path
from lmprobe.checkpoints.tokenizer import directory_tokenizer, gguf_tokenizer
from lmprobe.errors import LmprobeError
from lmprobe.store import temp_name

EOT = "<|endoftext|>"
TRAINED = "bpe"


def train_bpe(texts, vocab_size: int):
    """A byte-level BPE of ``vocab_size`` ids (``EOT`` is id 0) trained on ``texts``."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    if vocab_size < 300:
        raise LmprobeError(f"`vocab_size={vocab_size}` is below the 256 byte symbols plus merges: give at least 300")
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=[EOT], show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(texts, trainer=trainer, length=len(texts))
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token=EOT, eos_token=EOT, unk_token=EOT, pad_token=EOT)


def load_tokenizer(spec: str):
    """An existing tokenizer: an embedded model's name, or a directory with tokenizer files."""
    path = embedded_path(spec) or os.path.expanduser(spec)
    if path.endswith(".gguf") and os.path.isfile(path):
        return gguf_tokenizer(path)
    if os.path.isdir(path):
        return directory_tokenizer(path)
    raise LmprobeError(f"`tokenizer={spec}`: give '{TRAINED}' (train one), an embedded model's name "
                       "(smollm2-135m) or a directory with tokenizer files")


def tokenizer_for(spec: str, texts, vocab_size: int, directory: str):
    """The run's tokenizer, kept in ``directory`` (reused on resume, so its ids never change). It is
    saved into a folder of this writer's own beside ``directory`` and renamed into place; a writer
    that finds ``directory`` made meanwhile uses that one."""
    saved = os.path.join(directory, "tokenizer.json")
    if os.path.isfile(saved):
        return directory_tokenizer(directory)
    tokenizer = train_bpe(texts, vocab_size) if spec == TRAINED else load_tokenizer(spec)
    staging = temp_name(directory)
    os.makedirs(staging)
    try:
        tokenizer.save_pretrained(staging)
        os.replace(staging, directory)
    except OSError as e:
        if not os.path.isfile(saved):
            raise LmprobeError(f"cannot save the tokenizer to {directory} ({type(e).__name__}: {e}): delete that "
                               "folder, or free disk space") from None
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return directory_tokenizer(directory)


def separator(tokenizer) -> int:
    """The id that ends each document in the packed training stream: the tokenizer's EOS."""
    eos = tokenizer.eos_token_id
    if eos is None:
        raise LmprobeError("the tokenizer has no end-of-sequence token to separate documents: give one with an "
                           "eos_token (or `tokenizer=bpe`)")
    return int(eos)
