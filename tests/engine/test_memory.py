"""The load-time memory check (lmprobe.engine.memory) as Scorer.load uses it; the check itself and the
memory plan it shares its Planner with: tests/planning/test_plan.py."""

import logging

from lmprobe.engine import memory
from lmprobe.planning import plan as P


def test_a_scorer_takes_the_plans_token_cap(monkeypatch, tiny_llama_dir, caplog):
    """Where the device reports its memory (GPU, TPU; simulated here), Scorer.load caps its batches at what the
    plan found fits the longest bucket, and says so in its batch line."""
    from lmprobe.engine import Scorer, scorer

    one_row = P.plan(str(tiny_llama_dir), batch_size=1, max_length=64, search=False).step_memory.peak_bytes
    monkeypatch.setattr(memory, "device_hbm", lambda devices: int(one_row * 1.2))
    monkeypatch.setattr(scorer, "BATCH_LINES", set())
    with caplog.at_level(logging.INFO, logger="lmprobe"):
        loaded = Scorer.load(str(tiny_llama_dir), batch_size=4, max_length=64)
    assert loaded.max_tokens is not None and loaded.max_tokens % 64 == 0 and loaded.max_tokens < 4 * 64
    assert f"at most {loaded.max_tokens} tokens per device (the memory plan:" in caplog.text
