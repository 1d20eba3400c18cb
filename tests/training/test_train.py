"""The training front end's tiny preset: the loss falls from ln V, checkpoints land at the planned log-spaced
steps, each reloads with Scorer.load and reproduces its saved held-out loss, a resume repeats no step and
gives the uninterrupted run's curve, and the front end reports it."""

import json
import math

import jax
import numpy as np
import pytest

from lmprobe.errors import LmprobeError
from lmprobe.training import checkpoint_steps, hf_config, preset, train
from lmprobe.training.model import init_model

TINY = preset("tiny")
COMPARED = ("step", "heldout_loss", "train_loss", "tokens", "learning_rate")


def stop_before(n):
    """A progress wrapper that interrupts the loop (as Ctrl-C does) when it reaches step ``n``."""
    def progress(steps, **_):
        for step in steps:
            if step == n:
                raise KeyboardInterrupt
            yield step
    return progress


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    directory = tmp_path_factory.mktemp("train")
    return directory, train(TINY, str(directory))


def test_loss_falls_from_ln_vocab(run):
    _, result = run
    heldout = [r["heldout_loss"] for r in result.curve]
    assert abs(heldout[0] - math.log(TINY.vocab_size)) < 0.1  # the initialisers give a uniform-ish start
    assert heldout[-1] < heldout[0] - 0.6
    assert all(b < a for a, b in zip(heldout, heldout[1:]))  # a ladder of known order
    train_losses = [r["train_loss"] for r in result.curve[1:]]
    assert result.curve[0]["train_loss"] is None and train_losses[-1] < train_losses[0]


def test_checkpoints_at_the_planned_steps(run):
    from lmprobe.checkpoints import orbax_io

    directory, result = run
    assert checkpoint_steps(TINY) == [0, 8, 16, 32, 40]
    assert list(orbax_io.steps(str(directory / "checkpoints"))) == [0, 8, 16, 32, 40]
    assert [r["step"] for r in result.curve] == [0, 8, 16, 32, 40]
    assert [r["tokens"] for r in result.curve] == [s * TINY.train_batch_size * TINY.seq_len for s in [0, 8, 16, 32, 40]]
    log = [json.loads(line)["step"] for line in (directory / "train_log.jsonl").read_text().splitlines()]
    assert log == list(range(TINY.steps))


def test_each_checkpoint_reloads_and_reproduces_its_heldout_loss(run):
    from lmprobe.engine import Scorer

    directory, result = run
    texts = [json.loads(line)["text"] for line in (directory / "heldout.jsonl").read_text().splitlines()]
    assert len(texts) == TINY.heldout_documents
    for row in result.curve:
        scorer = Scorer.load(result.checkpoints[row["step"]], dtype="float32")
        scores = scorer.score(texts)
        assert scores.nll.sum() / scores.num_predicted.sum() == pytest.approx(row["heldout_loss"], rel=2e-5)


def test_resume_repeats_no_step_and_gives_the_same_curve(run, tmp_path):
    _, uninterrupted = run
    with pytest.raises(KeyboardInterrupt):
        train(TINY, str(tmp_path), progress=stop_before(20))  # the train state is saved at 20 (state_every)
    seen = []

    def count(steps, **_):
        for step in steps:
            seen.append(step)
            yield step

    resumed = train(TINY, str(tmp_path), progress=count)
    assert resumed.resumed_from == 20 and seen == list(range(20, TINY.steps))
    same = lambda curve: [{k: r[k] for k in COMPARED} for r in curve]  # noqa: E731
    assert same(resumed.curve) == same(uninterrupted.curve)  # the same seed, the same curve, to the bit
    log = [json.loads(line)["step"] for line in (tmp_path / "train_log.jsonl").read_text().splitlines()]
    assert log == list(range(TINY.steps))


def test_the_seed_sets_the_initial_weights():
    config = hf_config(TINY, 512, bos=0, eos=0)
    a, b, c = (jax.tree.leaves(init_model(config, seed).params) for seed in (0, 0, 1))
    assert all(np.array_equal(x, y) for x, y in zip(a, b))
    assert not all(np.array_equal(x, z) for x, z in zip(a, c))


def test_the_sliced_head_gives_the_full_logits_loss(monkeypatch):
    from lmprobe.training import model as model_lib

    module = init_model(hf_config(TINY, 512, bos=0, eos=0), 0).merge()
    ids = jax.random.randint(jax.random.key(0), (3, 64), 0, 512)
    mask = (np.arange(64)[None] < np.array([[64], [40], [9]])).astype(np.int32)
    full = model_lib.sequence_nll(module, ids, mask)
    monkeypatch.setattr(model_lib, "FULL_LOGITS_BYTES", 0)  # a large vocabulary: the engine's sliced LM head
    sliced = model_lib.sequence_nll(module, ids, mask)
    assert float(full[1]) == float(sliced[1]) == 63 + 39 + 8
    assert float(sliced[0]) == pytest.approx(float(full[0]), rel=1e-5)


def test_a_resume_with_other_settings_is_refused(run):
    directory, _ = run
    with pytest.raises(LmprobeError, match="other settings.*learning_rate"):
        train(preset("tiny", learning_rate=0.5), str(directory))


def test_front_end_reports_the_finished_run(run, capsys):
    from lmprobe.cli import train as front_end

    directory, result = run
    front_end.main(["--preset=tiny", f"--output_dir={directory}"])  # resumes at the last step: nothing to train
    saved = json.loads((directory / "results.json").read_text())
    assert [r["heldout_loss"] for r in saved["curve"]] == [r["heldout_loss"] for r in result.curve]
    assert saved["resumed_from"] == TINY.steps and saved["run_info"]["flags"]["preset"] == "tiny"
    assert (directory / "loss_curve.png").stat().st_size > 0
    assert "held-out" in capsys.readouterr().out


@pytest.mark.parametrize("argv, message", [
    (["--preset=huge"], "--preset=huge: choose from default, tiny"),
    (["--preset=tiny", "--num_heads=3"], "heads must divide hidden_size"),
    (["--preset=tiny", "--steps=0"], "give an integer >= 1"),
])
def test_bad_flags_are_one_line(argv, message, tmp_path, capsys):
    from lmprobe.cli import train as front_end

    with pytest.raises(SystemExit) as e:
        front_end.main([*argv, f"--output_dir={tmp_path}"])
    err = capsys.readouterr().err
    assert e.value.code == 2 and message in err and len(err.strip().splitlines()) == 1
