"""Command-line flags from dataclasses: a setting is declared once, with its type, default and help.

    @dataclasses.dataclass(frozen=True)
    class Config:
        n: int = 8192  # sentences per level            <- the help (or field(metadata={"help": ...}))
        levels: tuple[float, ...] = (0.0, 0.5)
        pooling: str | None = None
        baselines: bool = True

    p = flags.Parser("prog", description=__doc__)
    method = flags.add(p, Config, group="method")
    args = p.parse_args(["--n=4096", "--levels=0,0.2", "--levels=0.4", "--pooling=none", "--no_baselines"])
    method.make(args)  # Config(n=4096, levels=(0.0, 0.2, 0.4), pooling=None, baselines=False)

Types: bool (``--x`` / ``--no_x``), int, float, str, ``X | None`` ('none' gives None), ``tuple[X, ...]``
(repeat the flag or use commas, both everywhere; the first use replaces the default) and
``Literal[...]`` or ``choices=`` (checked per item); ranges through ``convert={"n": bounded(1)}``. A bad
value is one line on stderr and exit status 2. ``--config=FILE`` (YAML or JSON: flag names to values)
sets defaults; flags on the command line override it. A field whose flag the parser already has
reads that flag only when declared ``shared`` (a method's ``seed`` reads the shared ``--seed``); any
other such field is an error when the parser is built: give it its own flag name with ``names``.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import functools
import inspect
import io
import json
import math
import re
import sys
import textwrap
import tokenize
import types
import typing

from lmprobe.errors import LmprobeError

PROG = "python -m experiments.{name}"  # how --help and errors name a front end (`lmprobe` sets "lmprobe {name}")
_NONE, _TRUE, _FALSE = ("none", "null"), ("1", "true", "yes", "on"), ("0", "false", "no", "off")
_BASES = {int: "an integer", float: "a number", str: "text", bool: "true or false"}
_METAVARS = {int: "INT", float: "NUM", str: "STR", bool: "BOOL"}


class _Default(tuple):
    """A list flag's default: the first use of the flag replaces it, later uses extend."""


def show(value, sep: str = ",") -> str:
    """A value as one writes it on the command line (``sep`` between list items)."""
    if value is None:
        return "none"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, (tuple, list)):
        return sep.join(map(show, value)) if value else "''"
    if isinstance(value, str) and (not value or value != value.strip()):
        return repr(value)
    return repr(value) if isinstance(value, float) and not math.isinf(value) else str(value)


def _parse(base, text: str):
    low = text.strip().lower()
    if base is bool:
        if low in _TRUE or low in _FALSE:
            return low in _TRUE
        raise ValueError
    return base(text.strip()) if base in (int, float) else text


def bounded(low=None, high=None, *, base=int, strict: bool = False):
    """A ``convert=`` entry: ``base`` text in [low, high] ((low, high] with ``strict``; a bound
    None is open), else one line giving the range."""
    left, right = "(" if strict else "[", "]"
    if high is None:
        wanted = f"{_BASES[base]} {'>' if strict else '>='} {low}"
    else:
        wanted = f"{_BASES[base]} <= {high}" if low is None else f"{_BASES[base]} in {left}{low}, {high}{right}"

    def convert(text):
        value = _parse(base, text)
        below = low is not None and (value <= low if strict else value < low)
        if below or (high is not None and value > high):
            raise LmprobeError(f"give {wanted}, not {text.strip()}")
        return value

    return convert


def _converter(name: str, base, choices, optional: bool, custom):
    """text -> value: 'none' (optional fields), ``custom``, else ``base`` checked against ``choices``."""

    def convert(text):
        text = str(text)
        if optional and text.strip().lower() in _NONE:
            return None
        try:
            value = custom(text) if custom else _parse(base, text)
        except LmprobeError as e:
            raise argparse.ArgumentTypeError(str(e)) from None
        except (ValueError, TypeError):
            raise argparse.ArgumentTypeError(f"{text!r} is not {_BASES[base]}") from None
        if choices and value not in choices:
            raise argparse.ArgumentTypeError(f"{text!r} is not one of {', '.join(map(show, choices))}")
        return value

    convert.__name__ = name
    return convert


class _Many(argparse.Action):
    """A tuple flag: comma-separated items, and the flag repeated, accumulate."""

    def __init__(self, option_strings, dest, convert=None, optional=False, **kwargs):
        super().__init__(option_strings, dest, **kwargs)
        self.convert, self.optional = convert, optional

    def items(self, text: str) -> tuple:
        if self.optional and text.strip().lower() in _NONE:
            return None
        out = []
        for item in (t.strip() for t in text.split(",")):
            if item:
                value = self.convert(item)
                out += value if isinstance(value, list) else [value]  # a converter may expand a name
        return tuple(out)

    def __call__(self, parser, namespace, value, option_string=None):
        try:
            items = self.items(value)
        except argparse.ArgumentTypeError as e:
            raise argparse.ArgumentError(self, str(e)) from None
        current = getattr(namespace, self.dest, None)
        keep = () if current is None or items is None or isinstance(current, _Default) else tuple(current)
        setattr(namespace, self.dest, None if items is None else keep + items)


class _Bool(argparse.Action):
    """--x sets True, --no_x False."""

    def __init__(self, option_strings, dest, **kwargs):
        super().__init__(option_strings, dest, nargs=0, **kwargs)

    def __call__(self, parser, namespace, value, option_string=None):
        setattr(namespace, self.dest, not option_string.startswith("--no_"))


class Formatter(argparse.RawDescriptionHelpFormatter):
    """The description as written (its usage examples unreflowed); every flag with its default."""

    def __init__(self, prog):
        super().__init__(prog, max_help_position=34, width=100)

    def _split_lines(self, text, width):
        return textwrap.wrap(" ".join(text.split()), width, break_on_hyphens=False)

    def _get_help_string(self, action):
        text = action.help or ""
        if action.option_strings and action.default is not argparse.SUPPRESS and (
                action.nargs != 0 or isinstance(action, _Bool)) and "(default" not in text:
            text += f" (default: {show(action.default, ', ')})".replace("%", "%%")
        return text


class Parser(argparse.ArgumentParser):
    """argparse with one-line errors (exit status 2), ``--config=FILE`` and defaults in --help."""

    def __init__(self, prog: str | None = None, **kwargs):
        super().__init__(prog=prog, formatter_class=Formatter, allow_abbrev=False, **kwargs)
        self.usage = f"{self.prog} [--flag=value ...]"
        self.add_argument("--config", metavar="FILE", default=None,
                          help="YAML or JSON file of flag values (names as the flags, lists as lists); "
                               "flags given on the command line override it; a flag it sets that names code "
                               "to import and call (--model_fn, SynBench's --model=MODULE:FUNCTION) runs that "
                               "code, as on the command line: use only files you trust")
        self._groups: dict[str, argparse._ArgumentGroup] = {}
        self.trailing: tuple[str, ...] = ()  # group titles --help lists last
        self.settings: dict[str, str] = {}  # a dataclass field -> its flag's name (flags.add), for as_flags

    def has_flag(self, flag: str) -> bool:
        """Whether an argument already takes option string ``flag`` ('--seed')."""
        return flag in self._option_string_actions

    def group(self, title: str | None):
        if title is None:
            return self
        if title not in self._groups:
            self._groups[title] = self.add_argument_group(title)
        return self._groups[title]

    def format_help(self):
        self._action_groups.sort(key=lambda g: g.title in self.trailing)  # stable: the rest keep their order
        return super().format_help()

    def error(self, message):
        sys.stderr.write(f"error: {message} (see {self.prog} --help)\n")
        sys.exit(2)

    def parse_args(self, args=None, namespace=None):
        args = sys.argv[1:] if args is None else [str(a) for a in args]
        pre = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
        pre.add_argument("--config")
        path = pre.parse_known_args(args)[0].config
        if path:
            self.set_defaults(**self._from_file(path))
        ns = super().parse_args(args, namespace)
        for name, value in vars(ns).items():
            if isinstance(value, _Default):
                setattr(ns, name, tuple(value))
        return ns

    def _from_file(self, path: str) -> dict:
        """{dest: value} of a YAML / JSON config file, converted as the flags convert."""
        import yaml

        try:
            with open(path, encoding="utf-8") as f:
                text = f.read()
        except (OSError, UnicodeDecodeError) as e:
            self.error(f"--config={path}: cannot read it ({type(e).__name__}: {e})")
        try:
            data = json.loads(text) if path.lower().endswith(".json") else yaml.safe_load(text)
        except (ValueError, yaml.YAMLError) as e:
            self.error(f"--config={path}: not valid {'JSON' if path.lower().endswith('.json') else 'YAML'} "
                       f"({' '.join(str(e).split())})")
        if data is None:
            return {}
        if not isinstance(data, dict):
            self.error(f"--config={path}: give a mapping of flag names to values, not a {type(data).__name__}")
        out = {}
        for key, value in data.items():
            flag = "--" + str(key).lstrip("-").replace("-", "_")
            action = self._option_string_actions.get(flag)
            if action is None or flag in ("--config", "--help"):
                self.error(f"--config={path}: unknown flag '{key}'")
            try:
                out[action.dest] = _value_of(action, value)
            except argparse.ArgumentTypeError as e:
                self.error(f"--config={path}: {key}: {e}")
        return out


def _value_of(action, value):
    """A config-file value for ``action``: lists item by item, scalars as the flag's text."""
    if isinstance(action, _Bool) or (action.nargs == 0 and isinstance(action.const, bool)):
        try:
            value = value if isinstance(value, bool) else _parse(bool, str(value))
        except ValueError:
            raise argparse.ArgumentTypeError(f"{value!r} is not true or false") from None
        return value if action.const is not False else not value
    if isinstance(action, _Many):
        if value is None and action.optional:
            return None
        if isinstance(value, (list, tuple)):
            converted = (action.convert(str(item)) for item in value)
            return _Default(x for v in converted for x in (v if isinstance(v, list) else [v]))
        items = action.items(str(value))
        return None if items is None else _Default(items)
    if value is None:
        if action.type is not None and action.type("none") is not None:
            raise argparse.ArgumentTypeError("null: give a value, or leave the flag out")
        return None
    return action.type(str(value)) if action.type else value


@dataclasses.dataclass(frozen=True)
class Flags:
    """The flags of a dataclass: ``make(args)`` builds it from parsed arguments."""

    cls: type
    dests: dict  # field -> argparse dest

    def make(self, args, **overrides):
        values = {field: getattr(args, dest) for field, dest in self.dests.items()}
        return self.cls(**{**values, **overrides})


def kind(tp) -> tuple[type, bool, bool, tuple | None]:
    """(base type, optional, many, choices) of an annotation the flags support."""
    optional = many = False
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        rest = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(rest) != 1:
            raise TypeError(f"unsupported union {tp}")
        optional, tp = True, rest[0]
    if typing.get_origin(tp) is tuple:
        args = typing.get_args(tp)
        if len(args) != 2 or args[1] is not Ellipsis:
            raise TypeError(f"tuples must be tuple[X, ...], not {tp}")
        many, tp = True, args[0]
    choices = None
    if typing.get_origin(tp) is typing.Literal:
        choices = typing.get_args(tp)
        tp = type(choices[0])
    if tp not in _BASES:
        raise TypeError(f"unsupported flag type {tp}")
    return tp, optional, many, choices


@functools.cache
def comments(cls) -> dict[str, str]:
    """field -> the comment on its line, else the comment lines right above it (classes in the MRO)."""
    out = {}
    for klass in reversed(cls.__mro__[:-1]):
        try:
            source = textwrap.dedent(inspect.getsource(klass))
        except (OSError, TypeError):
            continue
        lines = source.splitlines()
        notes = {t.start[0]: t.string.lstrip("#").strip()
                 for t in tokenize.generate_tokens(io.StringIO(source).readline) if t.type == tokenize.COMMENT}
        classdef = next(n for n in ast.parse(source).body if isinstance(n, ast.ClassDef))
        for node in classdef.body:
            if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                above, line = [], node.lineno - 1
                while line >= 1 and lines[line - 1].strip().startswith("#"):
                    above.insert(0, notes.get(line, ""))
                    line -= 1
                text = notes.get(node.end_lineno) or " ".join(above)
                if text:
                    out[node.target.id] = text
    return out


SETTING = re.compile(r"`([a-z][a-z0-9_]*)(?:=([^`\s]*))?`")  # a setting as the library's errors name it


def as_flags(message: str, settings: dict[str, str]) -> str:
    """A library error, which names settings as `name` or `name=value` (its Python API), in a front
    end's flags: `model_parallel=2` -> --model_parallel=2, `generate=False` -> --no_generate; a setting
    the front end has no flag for stays as written."""
    def flag(match: re.Match) -> str:
        name, value = match.group(1), match.group(2)
        if name not in settings:
            return match.group(0)
        option = settings[name]
        if value in ("True", "False"):
            return f"--{option}" if value == "True" else f"--no_{option}"
        return f"--{option}" + ("" if value is None else f"={value}")

    return SETTING.sub(flag, message)


def add(parser: Parser, cls, *, group: str | None = None, help: dict | None = None, names: dict | None = None,
        aliases: dict | None = None, choices: dict | None = None, convert: dict | None = None,
        defaults: dict | None = None, shared=(), fields: tuple[str, ...] | None = None) -> Flags:
    """A flag per field of dataclass ``cls`` (of ``fields`` alone, when given) in argument group ``group``.

    ``help`` / ``defaults`` / ``choices``: per-field overrides; ``names``: field -> flag name (dest);
    ``aliases``: field -> extra option string(s) ('--eps'); ``convert``: field -> text -> value
    (a list result is spliced into a tuple flag); ``shared``: fields that read the flag of their
    name when the parser already has it (``seed``: --seed). Any other field whose flag the parser
    already has is a TypeError naming the field and the fix, never a silent second meaning."""
    help, names, aliases = help or {}, names or {}, aliases or {}
    choices, convert, defaults = choices or {}, convert or {}, defaults or {}
    hints, notes, target = typing.get_type_hints(cls), comments(cls), parser.group(group)
    dests = {}
    for f in dataclasses.fields(cls):
        if not f.init or (fields is not None and f.name not in fields):
            continue
        name = names.get(f.name, f.name)
        dests[f.name] = name
        parser.settings.setdefault(f.name, name)
        flag = f"--{name}"
        if parser.has_flag(flag):
            if f.name in shared:  # reads the parser's flag (--seed)
                continue
            raise TypeError(f"{cls.__module__}.{cls.__qualname__}.{f.name}: the parser already has {flag}, so the "
                            f"field would silently read it; give the field its own flag (names={{'{f.name}': "
                            f"'PREFIX_{name}'}}), or declare that it means the same (shared=('{f.name}',))")
        base, optional, many, literal = kind(hints[f.name])
        default = defaults.get(f.name, f.default)
        if f.name not in defaults and f.default_factory is not dataclasses.MISSING:
            default = f.default_factory()
        optional = optional or (f.name in defaults and default is None)
        required = default is dataclasses.MISSING
        default = None if required else default
        allowed = tuple(choices.get(f.name) or literal or ()) or None
        text = help.get(f.name) or f.metadata.get("help") or notes.get(f.name) or base.__name__
        extra = aliases.get(f.name, ())
        strings = [flag, *([extra] if isinstance(extra, str) else extra)]
        metavar = "{" + ",".join(map(str, allowed)) + "}" if allowed else _METAVARS[base]
        kwargs = dict(dest=name, help=text.replace("%", "%%"), required=required)
        fn = _converter(name, base, allowed, optional and not many, convert.get(f.name))
        if base is bool and not many:
            target.add_argument(*strings, f"--no_{name}", action=_Bool, default=default, **kwargs)
        elif many:
            target.add_argument(*strings, action=_Many, convert=fn, optional=optional, metavar=f"{metavar}[,...]",
                                default=None if default is None else _Default(default), **kwargs)
        else:
            target.add_argument(*strings, type=fn, metavar=metavar, default=default, **kwargs)
    return Flags(cls, dests)
