"""lmprobe as an lm-evaluation-harness backend: model ``lmprobe``, lm-eval's tasks on the JAX engine.

    python -m lmprobe.integrations.lm_eval --model lmprobe --model_args pretrained=opt-13b,dtype=bfloat16 --tasks ...

takes lm_eval's own arguments (lm-eval 0.4.13 finds models only in its registry, with no plugin entry
points, so plain ``lm_eval --model lmprobe`` cannot see this one). In Python, importing this module
registers the model: ``import lmprobe.integrations.lm_eval`` then ``lm_eval.simple_evaluate(model="lmprobe",
model_args="pretrained=smollm2-135m", tasks=[...])``.

Requests are tokenized exactly as lm-eval's HF backend (``hf``) does, so the same weights give the same
log-likelihoods. ``loglikelihood`` is ``Scorer.score_continuations``: the multi-token continuations of one
long context share rows whose visibility mask lets each see the context and itself (the context runs once:
a 4-way multiple-choice question costs one question plus its four answers), one-token continuations are
read at the context's last slot, short sequences share rows end to end, and everything else runs as plain
causal sequences; the LM head runs at the scored slots only; rows are bucketed and sharded by the Scorer.
``loglikelihood_rolling`` scores lm-eval's disjoint rolling windows the same way (a document longer than
the context is cut into windows of ``max_length``). ``generate_until`` runs Scorer.generate in rounds (32
new tokens, then doubling) and stops a prompt once its text holds a stop sequence or EOS; within a round, a
row ends at a token whose own text holds a stop string (``stop_ids``), and the decode loop once every row has
ended. ``batch_size`` is per device of the mesh's 'data' axis. In a multi-process JAX job every process
answers every request (lm-eval sees one rank), as every lmprobe front end does.
"""

from __future__ import annotations

import json
import sys

import numpy as np

try:
    import lm_eval.models  # noqa: F401  lm-eval's own backends first: it loads them only into an empty registry
    from lm_eval import utils as lm_eval_utils
    from lm_eval.api.model import TemplateLM
    from lm_eval.api.registry import register_model
    from lm_eval.models.utils import handle_stop_sequences, normalize_gen_kwargs, postprocess_generated_text
except ImportError as e:  # lm-eval is an optional extra
    from lmprobe.integrations import LM_EVAL_MISSING

    raise ImportError(LM_EVAL_MISSING) from e

from lmprobe import log
from lmprobe.engine import Scorer
from lmprobe.engine.runtime import release_free_memory
from lmprobe.errors import LmprobeError
from lmprobe.store import write_json

_log = log.get(__name__)
FIRST_ROUND = 32  # new tokens in generate_until's first round; each later round doubles
IGNORED_ARGS = ("device", "max_batch_size")  # lm-eval passes these to every backend; JAX picks devices


@register_model("lmprobe")
class LmprobeLM(TemplateLM):
    """lm-eval's model API on an lmprobe Scorer.

    model_args: ``pretrained`` (anything lmprobe loads: alias, hub id, directory, .gguf, smollm2-135m),
    ``dtype`` (auto | float32 | bfloat16 | float16), ``batch_size`` (sequences per device; 'auto': 16),
    ``max_tokens`` (per device), ``model_parallel``, ``sharding`` (fsdp | tp), ``offline``, ``revision``,
    ``allow_pickle``, ``max_length`` (context; the model's by default), ``max_gen_toks`` (256),
    ``add_bos_token`` and ``prefix_token_id`` (as in lm-eval's hf), ``seed`` (sampled generation).
    Or pass a ready ``scorer=``.

    Compile before you rent: ``compile_only=True`` with ``target`` (a TPU slice, e.g. v5e-8; none: this
    host's devices), ``num_slices`` and ``hbm`` (bytes per device) compiles every step lm-eval's requests
    would run, reading no weight and running nothing (lmprobe.planning.aot): the answers are zeros, so lm-eval's
    metrics mean nothing; after each batch of requests the report (per step: shapes, calls, memory per device
    and fit, the TPU cost model's estimate) goes to ``report`` (a JSON path; default
    lmprobe_compile_report.json) and the log, and ``main`` prints it last.
    """

    def __init__(self, pretrained: str = "smollm2-135m", *, scorer: Scorer | None = None, dtype: str = "auto",
                 batch_size: int | str | None = 16, max_tokens: int | None = None, model_parallel: int = 1,
                 sharding: str = "fsdp", offline: bool | None = None, revision: str | None = None,
                 allow_pickle: bool = False, max_length: int | None = None, max_gen_toks: int = 256,
                 add_bos_token: bool | None = None, prefix_token_id: int | None = None, seed: int = 0,
                 compile_only: bool = False, target: str | None = None, num_slices: int = 1, hbm: str | None = None,
                 report: str = "lmprobe_compile_report.json", **unknown):
        super().__init__()
        unknown = {k: v for k, v in unknown.items() if k not in IGNORED_ARGS}
        if unknown:
            raise LmprobeError(f"model_args for lmprobe: unknown {', '.join(sorted(unknown))}; known: pretrained, "
                               "dtype, batch_size, max_tokens, model_parallel, sharding, offline, revision, "
                               "allow_pickle, max_length, max_gen_toks, add_bos_token, prefix_token_id, seed, "
                               "compile_only, target, num_slices, hbm, report")
        if target is not None and not compile_only:
            raise LmprobeError(f"target={target} compiles for a TPU slice this run is not on: add compile_only=True "
                               "to the model_args (compile every step and report, run nothing), or drop target")
        self.report_path = report if compile_only else None
        if scorer is None:
            per_device = 16 if batch_size is None or str(batch_size).startswith("auto") else int(batch_size)
            if compile_only:
                scorer = _compile_only_scorer(pretrained, dtype, model_parallel, sharding, per_device, max_tokens,
                                              offline, revision, target, num_slices, hbm)
                COMPILE_ONLY.append(self)
            else:
                scorer = Scorer.load(pretrained, dtype=dtype, model_parallel=model_parallel, strategy=sharding,
                                     offline=offline, allow_pickle=allow_pickle, batch_size=per_device,
                                     max_tokens=max_tokens, **({"revision": revision} if revision else {}))
        if scorer.tokenizer is None:
            raise LmprobeError("lm-eval sends text: the lmprobe Scorer needs a tokenizer")
        self.scorer, self.tokenizer, self.pretrained = scorer, scorer.tokenizer, pretrained
        self._max_length = int(max_length or scorer.max_length)
        self._max_gen_toks, self.add_bos_token, self.seed = int(max_gen_toks), add_bos_token, seed
        if prefix_token_id is not None and not 0 <= int(prefix_token_id) < scorer.vocab_size:
            raise LmprobeError(f"prefix_token_id={prefix_token_id} is outside the model's vocabulary of "
                               f"{scorer.vocab_size} ids: give a token id of this model's tokenizer, or leave it out")
        self.custom_prefix_token_id = prefix_token_id
        self._token_texts = None  # every id's text (stop_ids)
        release_free_memory()  # the loader's freed buffers: lm-eval runs in the same process

    @classmethod
    def create_from_arg_string(cls, arg_string, additional_config=None):
        return cls.create_from_arg_obj(lm_eval_utils.simple_parse_args_string(arg_string), additional_config)

    @classmethod
    def create_from_arg_obj(cls, arg_dict, additional_config=None):
        """model_args win over lm-eval's --batch_size / --device defaults (the CLI always passes batch_size=1)."""
        extra = {k: v for k, v in (additional_config or {}).items() if v is not None and k not in arg_dict}
        return cls(**arg_dict, **extra)

    # ------------------------------------------------------------------ tokens, as lm-eval's hf backend

    @property
    def eot_token_id(self) -> int:
        return self.tokenizer.eos_token_id

    @property
    def prefix_token_id(self) -> int:
        if self.custom_prefix_token_id is not None:
            return self.custom_prefix_token_id
        bos = self.tokenizer.bos_token_id
        return self.tokenizer.eos_token_id if bos is None else bos

    @property
    def max_length(self) -> int:
        return self._max_length

    @property
    def max_gen_toks(self) -> int:
        return self._max_gen_toks

    @property
    def tokenizer_name(self) -> str:
        return self.tokenizer.name_or_path.replace("/", "__")

    def tok_encode(self, string: str, add_special_tokens: bool | None = None, left_truncate_len: int | None = None,
                   **kwargs) -> list[int]:
        if add_special_tokens is None:
            add_special_tokens = self.add_bos_token
            if string.startswith(self.tokenizer.decode(self.prefix_token_id)):
                add_special_tokens = False
        ids = self.tokenizer.encode(string, **({} if add_special_tokens is None else
                                               {"add_special_tokens": add_special_tokens}))
        return ids[-left_truncate_len:] if left_truncate_len else ids

    def tok_decode(self, tokens, skip_special_tokens: bool = True) -> str:
        return self.tokenizer.decode(tokens, skip_special_tokens=skip_special_tokens)

    def apply_chat_template(self, chat_history, add_generation_prompt: bool = True) -> str:
        return self.tokenizer.apply_chat_template(chat_history, tokenize=False,
                                                  add_generation_prompt=add_generation_prompt,
                                                  continue_final_message=not add_generation_prompt)

    def get_model_info(self) -> dict:
        """What produced the results (lm-eval adds it to results.json's config)."""
        return {"model_backend": "lmprobe", "lmprobe_model": getattr(self.scorer, "identity", self.pretrained),
                "mesh": dict(self.scorer.mesh.shape), "batch_size_per_device": self.scorer.batch_size}

    # ------------------------------------------------------------------ requests

    def compile_report(self):
        """What a compile-only model (``compile_only=True``) compiled so far (lmprobe.planning.aot.CompileReport)."""
        from lmprobe.planning.aot import compile_report

        return compile_report(self.scorer, [COMPILED_ON_ZEROS])

    def _answered(self, kind: str, keys, answers) -> None:
        """Answers into lm-eval's cache (``--use_cache``); a compile-only model's zeros never go there: its
        report is written instead."""
        if self.report_path is not None:
            report = self.compile_report()
            write_json(self.report_path, {"model": self.pretrained, **report.to_dict()})
            _log.info(f"compile-only: report in {self.report_path}\n{report.table()}")
            return
        for key, answer in zip(keys, answers):
            if key is not None:
                self.cache_hook.add_partial(kind, key, answer)

    def _loglikelihood_tokens(self, requests, disable_tqdm: bool = False, **kwargs) -> list[tuple[float, bool]]:
        results = self.scorer.score_continuations([(ctx, cont) for _, ctx, cont in requests], limit=self.max_length)
        release_free_memory()  # what the compilations freed
        self._answered("loglikelihood", [key for key, _, _ in requests], results)
        return results

    def loglikelihood_rolling(self, requests, disable_tqdm: bool = False) -> list[float]:
        windows, owners = [], []
        for i, (string,) in enumerate(req.args for req in requests):
            rolling = lm_eval_utils.get_rolling_token_windows(self.tok_encode(string), self.prefix_token_id,
                                                              self.max_length, 1)
            for window in map(lm_eval_utils.make_disjoint_window, rolling):
                windows.append(window)
                owners.append(i)
        totals = np.zeros(len(requests))
        for i, (logprob, _) in zip(owners, self.scorer.score_continuations(windows, limit=self.max_length)):
            totals[i] += logprob
        release_free_memory()
        self._answered("loglikelihood_rolling", [req.args for req in requests], [float(t) for t in totals])
        return [float(t) for t in totals]

    def generate_until(self, requests, disable_tqdm: bool = False) -> list[str]:
        by_kwargs = {}  # one engine call per distinct gen_kwargs, as lm-eval's hf groups them
        for i, req in enumerate(requests):
            by_kwargs.setdefault(json.dumps(req.args[1], sort_keys=True, default=str), []).append(i)
        eos = self.tok_decode([self.eot_token_id], skip_special_tokens=False)
        results = [""] * len(requests)
        for indices in by_kwargs.values():
            kwargs = normalize_gen_kwargs(requests[indices[0]].args[1], self.max_gen_toks)
            until = handle_stop_sequences(kwargs.pop("until", None), eos=eos)
            max_new = kwargs.pop("max_gen_toks")
            if max_new >= self.max_length:
                raise LmprobeError(f"max_gen_toks={max_new} leaves no room for a prompt in the context of "
                                   f"{self.max_length} tokens")
            prompts = [self._prompt_ids(requests[i].args[0], self.max_length - max_new) for i in indices]
            for i, text in zip(indices, self._generate(prompts, until, max_new, kwargs)):
                results[i] = postprocess_generated_text(text, until, None)
        release_free_memory()
        self._answered("generate_until", [req.args for req in requests], results)
        return results

    def _prompt_ids(self, context: str, room: int) -> list[int]:
        """Token ids of a generation prompt, as lm-eval's hf encodes a batch (BOS rule), cut to the last ``room``."""
        bos = self.tokenizer.bos_token
        special = False if bos and context.startswith(bos) else self.add_bos_token
        ids = self.tokenizer(context, **({} if special is None else {"add_special_tokens": special}))["input_ids"]
        return ids[-room:]

    def stop_ids(self, until) -> tuple[int, ...]:
        """The ids whose text, decoded alone, holds one of the stop strings ``until``: a row that emits one has
        (almost always) met a stop string, so the decode loop stops it there. Where the text of its row does
        not hold the string after all, ``_generate`` takes the row on in its next round: the same tokens."""
        if self._token_texts is None:  # decoded once per model: 0.2 s for 49k ids with a fast tokenizer
            ids = [[i] for i in range(self.scorer.vocab_size)]
            fast = getattr(self.tokenizer, "backend_tokenizer", None)
            self._token_texts = (fast.decode_batch(ids, skip_special_tokens=True) if fast is not None else
                                 self.tokenizer.batch_decode(ids, skip_special_tokens=True))
        until = [s for s in until if s]
        return tuple(i for i, text in enumerate(self._token_texts) if any(s in text for s in until))

    def _generate(self, prompts, until, max_new: int, kwargs) -> list[str]:
        """Continuations (texts), in rounds: a prompt leaves once it emitted EOS, holds a stop sequence or
        reached ``max_new`` tokens; the others go on from their prompt plus what they generated."""
        temperature = float(kwargs.pop("temperature", 0.0) or 0.0)
        temperature = temperature if kwargs.pop("do_sample", False) else 0.0
        sampling = {"temperature": temperature, "top_p": float(kwargs.pop("top_p", None) or 1.0),
                    "top_k": int(kwargs.pop("top_k", None) or 0)}
        kwargs.pop("max_length", None)
        if kwargs:
            _log.warning("lmprobe ignores these generation kwargs: %s", ", ".join(sorted(kwargs)))
        eos = () if self.eot_token_id is None else (self.eot_token_id,)  # EOS too: with or without stop strings,
        new, stop_ids = [[] for _ in prompts], self.stop_ids(until) + eos  # one program
        live, size, done, round_ = list(range(len(prompts))), min(FIRST_ROUND, max_new), 0, 0
        while live:
            out = self.scorer.generate([prompts[i] + new[i] for i in live], max_new_tokens=size, decode=False,
                                       eos_id=self.eot_token_id, seed=self.seed + round_, stop_ids=stop_ids,
                                       **sampling)
            done, round_ = done + size, round_ + 1
            still = []
            for i, ids in zip(live, out):
                new[i] += ids
                stopped = bool(ids) and ids[-1] == self.eot_token_id
                if not (stopped or done >= max_new or any(s and s in self.tok_decode(new[i]) for s in until)):
                    still.append(i)
            live, size = still, min(2 * size, max_new - done)
        return [self.tok_decode(ids) for ids in new]


COMPILE_ONLY: list[LmprobeLM] = []  # compile-only models made in this process: main prints their reports last
COMPILED_ON_ZEROS = ("lm-eval's requests as a run makes them; answers are zeros: generate_until's rounds run to "
                     "max_gen_toks unless a zero is the end-of-text token, and lm-eval's metrics mean nothing")


def _compile_only_scorer(name, dtype, model_parallel, sharding, batch_size, max_tokens, offline, revision, target,
                         num_slices, hbm):
    """A compile-only Scorer (lmprobe.planning.aot) of ``name`` from the model_args."""
    from lmprobe.planning import aot
    from lmprobe.planning.plan import parse_bytes
    from lmprobe.planning.targets import target as target_slice

    return aot.compile_only_scorer(
        name, target=None if target is None else target_slice(target, int(num_slices)),
        dtype=None if dtype == "auto" else dtype, model_parallel=int(model_parallel), strategy=sharding,
        batch_size=batch_size, max_tokens=max_tokens, offline=offline, revision=revision,
        hbm_bytes=None if hbm is None else parse_bytes(hbm, flag="hbm"))


def main(argv=None) -> None:
    """lm-eval's command line with the ``lmprobe`` model registered (same arguments as ``lm_eval``); a
    compile-only model's report is printed after lm-eval's output."""
    from lm_eval.__main__ import cli_evaluate

    if argv is not None:
        sys.argv = ["lm_eval", *argv]
    cli_evaluate()
    for lm in COMPILE_ONLY:
        print(f"\n{lm.compile_report().table()}\nreport in {lm.report_path} (lm-eval's metrics above come "
              "from zeros: a compile-only run computes nothing)")
    COMPILE_ONLY.clear()


if __name__ == "__main__":
    main()
