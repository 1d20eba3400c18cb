"""experiments.flags: flags from dataclasses (types, lists, bad values, --config files, help)."""

from __future__ import annotations

import dataclasses
import json
import math
from typing import Literal

import pytest

from lmprobe.cli import flags


@dataclasses.dataclass(frozen=True)
class Example:
    n: int = 8  # sentences per level
    rate: float = 0.5
    name: str = "a b"  # a name
    # a comment above the field
    # on two lines
    pooling: str | None = None
    levels: tuple[float, ...] = (0.0, 0.5)  # mixing ratios
    words: tuple[str, ...] | None = None
    enabled: bool = True  # a switch
    mode: Literal["x", "y"] = "x"
    limit: int | None = 3
    documented: int = dataclasses.field(default=1, metadata={"help": "from the metadata"})


def _parser():
    p = flags.Parser("prog", description="Example.\n\n    prog --n=3   (kept as written)\n")
    p.add_argument("--seed", type=int, default=0)  # a shared flag the dataclass reads
    return p, flags.add(p, Example, group="example", aliases={"levels": "--p"})


def _parse(argv):
    p, example = _parser()
    return example.make(p.parse_args(argv))


def test_defaults_and_types():
    assert _parse([]) == Example()
    got = _parse(["--n=3", "--rate", "1e-2", "--name=", "--pooling=mean", "--no_enabled", "--mode=y", "--limit=none",
                  "--words=a,b"])
    assert got == Example(n=3, rate=0.01, name="", pooling="mean", enabled=False, mode="y", limit=None,
                          words=("a", "b"))
    assert _parse(["--pooling=None", "--enabled"]).pooling is None


def test_lists_repeat_or_comma_and_the_first_use_replaces_the_default():
    assert _parse(["--levels=0.1,0.2", "--levels", "0.3"]).levels == (0.1, 0.2, 0.3)
    assert _parse(["--p=0.4"]).levels == (0.4,)  # an alias: the old flag name
    assert _parse(["--levels="]).levels == ()
    assert _parse(["--words=a", "--words=b,c"]).words == ("a", "b", "c")
    assert _parse(["--words=a", "--words=none"]).words is None


def test_none_in_a_config_file(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("words: none\nlimit: null\npooling: none\n")
    assert _parse([f"--config={path}"]) == Example(words=None, limit=None, pooling=None)


@pytest.mark.parametrize("argv, message", [
    (["--n=1.5"], "argument --n: '1.5' is not an integer"),
    (["--rate=fast"], "argument --rate: 'fast' is not a number"),
    (["--levels=0.1,x"], "argument --levels/--p: 'x' is not a number"),
    (["--mode=z"], "argument --mode: 'z' is not one of x, y"),
    (["--limit=many"], "argument --limit: 'many' is not an integer"),
    (["--no_such_flag=1"], "unrecognized arguments: --no_such_flag=1"),
    (["--lev=0.1"], "unrecognized arguments"),  # no abbreviations: a config key means one flag
])
def test_a_bad_value_is_one_line_and_status_2(argv, message, capsys):
    with pytest.raises(SystemExit) as stop:
        _parse(argv)
    err = capsys.readouterr().err
    assert stop.value.code == 2 and len(err.splitlines()) == 1 and err.startswith("error: ") and message in err
    assert "Traceback" not in err


@pytest.mark.parametrize("suffix", [".yaml", ".json"])
def test_a_config_file_sets_defaults_and_flags_override_it(tmp_path, suffix):
    values = {"n": 5, "levels": [0.1, 0.2], "enabled": False, "pooling": None, "words": ["a,b", "c"], "mode": "y",
              "rate": "2e-3", "seed": 7, "limit": None}
    path = tmp_path / f"run{suffix}"
    if suffix == ".json":
        path.write_text(json.dumps(values))
    else:
        import yaml

        path.write_text(yaml.safe_dump(values))
    got = _parse([f"--config={path}"])
    assert got == Example(n=5, levels=(0.1, 0.2), enabled=False, words=("a,b", "c"), mode="y", rate=0.002, limit=None)
    p, example = _parser()
    assert p.parse_args([f"--config={path}"]).seed == 7
    over = _parse([f"--config={path}", "--n=6", "--levels=0.9", "--enabled", "--levels=1"])
    assert over.n == 6 and over.levels == (0.9, 1.0) and over.enabled and over.words == ("a,b", "c")


@pytest.mark.parametrize("text, message", [
    ("n: [1, 2]\n", "n: '[1, 2]' is not an integer"),
    ("bogus: 1\n", "unknown flag 'bogus'"),
    ("- 1\n", "give a mapping of flag names to values"),
    ("n: [1\n", "not valid YAML"),
    ("enabled: maybe\n", "'maybe' is not true or false"),
    ("name: null\n", "name: null: give a value"),
    ("n: null\n", "n: 'none' is not an integer"),
])
def test_a_bad_config_file_is_one_line(tmp_path, capsys, text, message):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(SystemExit) as stop:
        _parse([f"--config={path}"])
    err = capsys.readouterr().err
    assert stop.value.code == 2 and len(err.splitlines()) == 1 and message in err and str(path) in err


def test_a_missing_config_file_is_one_line(tmp_path, capsys):
    with pytest.raises(SystemExit):
        _parse([f"--config={tmp_path / 'none.yaml'}"])
    assert "cannot read it" in capsys.readouterr().err


def test_help_has_defaults_comments_and_the_description_as_written():
    p, _ = _parser()
    text = p.format_help()
    assert "    prog --n=3   (kept as written)" in text
    assert "sentences per level (default: 8)" in text and "mixing ratios (default: 0.0, 0.5)" in text
    assert "a comment above the field on two lines (default: none)" in text
    assert "from the metadata (default: 1)" in text and "(default: 'a b')" not in text
    assert "--enabled, --no_enabled" in text and "a switch (default: true)" in text and "{x,y}" in text


def test_comments_are_read_from_the_source():
    assert flags.comments(Example) == {"n": "sentences per level", "name": "a name",
                                       "pooling": "a comment above the field on two lines",
                                       "levels": "mixing ratios", "enabled": "a switch"}


def test_show_writes_values_as_flags_take_them():
    assert [flags.show(v) for v in (None, True, (1, 2), (), "", " x", 0.1, math.inf, "abc")] == [
        "none", "true", "1,2", "''", "''", "' x'", "0.1", "inf", "abc"]


def test_unsupported_field_types_fail_at_declaration():
    @dataclasses.dataclass
    class Bad:
        pair: tuple[int, int] = (1, 2)

    with pytest.raises(TypeError, match="tuple"):
        flags.add(flags.Parser("x"), Bad)


@pytest.mark.parametrize("argv, message", [
    (["--n=0"], "argument --n: give an integer >= 1, not 0"),
    (["--n=-4"], "argument --n: give an integer >= 1, not -4"),
    (["--n=x"], "argument --n: 'x' is not an integer"),
    (["--rate=0"], "argument --rate: give a number in (0, 1], not 0"),
    (["--rate=1.5"], "argument --rate: give a number in (0, 1], not 1.5"),
    (["--levels=0.5,2"], "argument --levels/--p: give a number in [0, 1], not 2"),
    (["--limit=0"], "argument --limit: give an integer >= 1, not 0"),
])
def test_a_range_is_checked_by_the_flag_and_is_one_line(argv, message, capsys):
    p = flags.Parser("prog")
    flags.add(p, Example, aliases={"levels": "--p"}, convert={
        "n": flags.bounded(1), "limit": flags.bounded(1), "rate": flags.bounded(0, 1, base=float, strict=True),
        "levels": flags.bounded(0, 1, base=float)})
    assert p.parse_args(["--n=1", "--rate=1", "--levels=0,1", "--limit=none"]).limit is None  # the bounds pass
    with pytest.raises(SystemExit) as stop:
        p.parse_args(argv)
    err = capsys.readouterr().err
    assert stop.value.code == 2 and len(err.splitlines()) == 1 and message in err


def test_a_field_named_as_a_flag_the_parser_has_fails_unless_declared_shared():
    @dataclasses.dataclass(frozen=True)
    class Method:
        seed: int = 0
        batch_size: int = 64

    p = flags.Parser("prog")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--batch_size", type=int, default=16)
    with pytest.raises(TypeError, match=r"Method\.batch_size: the parser already has --batch_size.*"
                                        r"names=\{'batch_size': 'PREFIX_batch_size'\}.*shared=\('batch_size',\)"):
        flags.add(p, Method, shared=("seed",))
    method = flags.add(p, Method, shared=("seed",), names={"batch_size": "method_batch_size"})
    assert method.make(p.parse_args([])) == Method(seed=0, batch_size=64)  # its own default, not --batch_size's
    args = p.parse_args(["--seed=3", "--method_batch_size=8", "--batch_size=2"])
    assert method.make(args) == Method(seed=3, batch_size=8) and args.batch_size == 2


def test_library_errors_name_settings_and_front_ends_print_them_as_flags():
    """The library's errors speak its API (`name=value`); a front end prints its own flags for them."""
    settings = {"model_parallel": "model_parallel", "generate": "generate", "n_bootstrap": "bootstrap"}
    text = "pass `model_parallel=2`, `generate=False`, `generate=True`, `n_bootstrap=9`, `other=1` or `column`"
    assert flags.as_flags(text, settings) == ("pass --model_parallel=2, --no_generate, --generate, --bootstrap=9, "
                                              "`other=1` or `column`")
    assert flags.as_flags("run `python -m experiments.assets --install data`", settings) == \
        "run `python -m experiments.assets --install data`"
    # through a front end: tests/cli/test_validate.py (SynBench's `synbench_n=64` as --synbench_n=64)
