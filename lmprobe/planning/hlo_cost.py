"""The cost of a compiled program counted from its optimized HLO, every loop body times its trip count.

XLA's ``cost_analysis()`` counts the body of a while loop once (a layer scan of 40 layers: one layer's
FLOPs), so it is no measure of a scanned model. ``program_cost(compiled.as_text())`` walks the
program the compiler produced (per device, after partitioning and fusion): the FLOPs of its matrix
products (dot, convolution), the bytes each top-level operation reads and writes (operands and
result, as XLA's cost analysis counts a fusion), and the bytes its collectives move; each times the
trip count of the loops around it (read from the loop condition's bound).

Of those bytes, ``hbm_bytes`` are the ones in HBM: the TPU compiler places some buffers in on-chip
memory (a layout's memory space ``S(1)``, VMEM: a decoding step's weights or cache prefetched by
``copy-start`` and read there), and an operation reading or writing such a buffer moves no HBM bytes
for it; an asynchronous slice into VMEM (``slice-start``, the TPU compiler's way of staging attention's
q, k, v) moves its slice once, and the custom calls that allocate or lay buffers side by side move
nothing. ``while_loops`` and ``computation=`` give the cost of one trip of a loop (a decoding step
inside a generation program); ``ops=`` the cost of each operation.
"""

from __future__ import annotations

import dataclasses
import math
import re

_BYTES = {"pred": 1, "s8": 1, "u8": 1, "s16": 2, "u16": 2, "f16": 2, "bf16": 2, "s32": 4, "u32": 4, "f32": 4,
          "s64": 8, "u64": 8, "f64": 8, "c64": 8, "c128": 16, "s4": 0.5, "u4": 0.5}
_ARRAY = re.compile(r"\b([a-z]+[0-9a-z]*)\[([0-9,]*)\](\{[^}]*\})?")
_HEADER = re.compile(r"^(?:ENTRY\s+)?%(\S+)\s*\(.*\)\s*->\s*.*\{\s*$")
_FREE = {"parameter", "get-tuple-element", "tuple", "bitcast", "constant", "while", "call", "conditional",
         "after-all", "partition-id", "replica-id", "opt-barrier", "copy-done", "slice-done", "all-gather-done",
         "all-reduce-done", "collective-permute-done", "send-done", "recv-done", "async-done", "add-dependency"}
# the TPU compiler's custom calls that move no bytes: a buffer allocated, slices laid side by side taken as one
_FREE_CALLS = re.compile(r'custom_call_target="(?:AllocateBuffer|ConcatBitcast)"')
_COLLECTIVES = ("all-gather", "all-reduce", "reduce-scatter", "all-to-all", "collective-permute",
                "ragged-all-to-all")


@dataclasses.dataclass(frozen=True)
class ProgramCost:
    """Per device: FLOPs of matrix products, bytes read and written by operations (``hbm_bytes`` of
    them in HBM, the rest in on-chip memory), bytes moved by collectives (all over loop trip counts);
    ``unknown_loops``: loops whose trip count was not found (counted once); ``custom_calls``: runs of
    Pallas kernels, whose FLOPs are not counted."""

    flops: float
    bytes_accessed: float
    collective_bytes: float
    seconds: float  # roofline: each operation at max(FLOPs / peak, bytes / bandwidth), summed
    unknown_loops: int
    custom_calls: int
    hbm_bytes: float = 0.0


@dataclasses.dataclass(frozen=True)
class OpCost:
    """One top-level operation's share of a ``ProgramCost`` (all trips of the loops around it)."""

    name: str
    opcode: str
    source: str  # the op_name of its metadata: the JAX operation it came from
    times: float  # trips of the loops around it
    flops: float
    bytes_accessed: float
    hbm_bytes: float
    seconds: float


@dataclasses.dataclass
class _Op:
    name: str
    opcode: str
    out: list  # [(dtype, dims)]
    operands: list
    attrs: str
    args: list = dataclasses.field(default_factory=list)  # operand names
    sources: dict = dataclasses.field(default_factory=dict)  # operand name -> its arrays


def _arrays(text: str) -> list:
    """[(dtype, dims, memory space)]: the space from the layout's S(n), 0 (HBM) without one."""
    out = []
    for d, dims, layout in _ARRAY.findall(text):
        space = re.search(r"S\((\d+)\)", layout)
        out.append((d, tuple(int(x) for x in dims.split(",") if x), int(space.group(1)) if space else 0))
    return out


def _nbytes(arrays, hbm: bool = False) -> float:
    """Bytes of ``arrays``; ``hbm``: of those in HBM (memory space 0) only."""
    return sum(_BYTES.get(a[0], 4) * math.prod(a[1]) for a in arrays if not (hbm and a[2]))


def _split_type(rest: str) -> tuple[str, str]:
    """('the result type', 'opcode(...)...') of an instruction's right-hand side."""
    if rest.startswith("("):
        depth = 0
        for i, c in enumerate(rest):
            depth += c == "("
            depth -= c == ")"
            if depth == 0:
                return rest[: i + 1], rest[i + 1:].strip()
    head, _, tail = rest.partition(" ")
    return head, tail


def _parse(text: str) -> tuple[dict, str | None]:
    """{computation: [_Op]}, the entry's name; operands resolved to their arrays (names are unique
    in a module; the text names operands without their shapes)."""
    comps, entry, current, shapes, pending = {}, None, None, {}, []
    for line in text.splitlines():
        m = _HEADER.match(line)
        if m:
            current = comps.setdefault(m.group(1), [])
            entry = m.group(1) if line.startswith("ENTRY") else entry
            continue
        if current is None or "=" not in line or not line.startswith("  "):
            continue
        lhs, _, rhs = line.strip().partition(" = ")
        if not lhs.removeprefix("ROOT ").startswith("%"):
            continue
        typ, call = _split_type(rhs.strip())
        opcode, _, rest = call.partition("(")
        depth, end = 1, len(rest)
        for i, c in enumerate(rest):
            depth += (c == "(") - (c == ")")
            if depth == 0:
                end = i
                break
        args = re.findall(r"%([\w.\-]+)", rest[:end])
        opcode = opcode.strip()
        # a parameter's attrs: its index; a constant's: its value
        attrs = rest[:end].strip() if opcode in ("parameter", "constant") else rest[end + 1:]
        op = _Op(lhs.removeprefix("ROOT ").strip().lstrip("%"), opcode, _arrays(typ), args, attrs, args)
        shapes[op.name] = op.out
        current.append(op)
        pending.append(op)
    for op in pending:
        op.sources = {name: shapes.get(name, []) for name in op.args}
        op.operands = [a for name in op.args for a in shapes.get(name, [])]
    return comps, entry


def _matmul_flops(op: _Op) -> float:
    if not op.out or len(op.operands) < 2:
        return 0.0
    out = math.prod(op.out[0][1])
    lhs, rhs = op.operands[0][1], op.operands[1][1]
    if op.opcode == "dot":
        m = re.search(r"lhs_contracting_dims=\{([0-9,]*)\}", op.attrs)
        k = math.prod(lhs[int(i)] for i in m.group(1).split(",") if i) if m else 1
        return 2.0 * out * k
    m = re.search(r"dim_labels=(\w+)_(\w+)->", op.attrs)
    if not m or len(m.group(1)) != len(lhs) or len(m.group(2)) != len(rhs):
        return 0.0
    lhs_labels, rhs_labels = m.groups()
    spatial = sorted(c for c in rhs_labels if c.isdigit())
    window = re.search(r"window=\{size=([0-9x]+)", op.attrs)
    sizes = [int(x) for x in window.group(1).split("x")] if window else [rhs[rhs_labels.index(c)] for c in spatial]
    # each output sums the input features times the window taps that fall on real input (a dot written
    # as a convolution pads a size-1 dimension and slides a window over it: one tap; a batched dot
    # written as a convolution over an input dilated by the window's size (lhs_dilate): one tap too)
    dilate = re.search(r"lhs_dilate=([0-9x]+)", op.attrs)
    dilations = [int(x) for x in dilate.group(1).split("x")] if dilate else [1] * len(sizes)
    k = rhs[rhs_labels.index("i")] if "i" in rhs_labels else 1
    for c, size, d in zip(spatial, sizes, dilations):
        taps = -(-size // d)
        k *= min(taps, lhs[lhs_labels.index(c)]) if c in lhs_labels else taps
    return 2.0 * out * k


def program_cost(text: str, *, peak_flops: float, hbm_bandwidth: float, computation: str | None = None,
                 ops: list | None = None) -> ProgramCost:
    """The cost of an optimized HLO module's text (``compiled.as_text()``), per device: of its entry,
    or of ``computation`` run once (a loop's body: one trip, ``while_loops``). ``ops``: a list that
    gets one ``OpCost`` for every operation counted (the breakdown of the totals)."""
    comps, entry = _parse(text)
    constants = _constants(text)
    totals = {"flops": 0.0, "bytes": 0.0, "hbm": 0.0, "collective": 0.0, "seconds": 0.0, "unknown": 0, "custom": 0}
    channels: set = set()  # (computation, channel id) of the asynchronous collectives counted
    top = totals  # ``ops`` records what is counted here, not in conditionals' branches (the costliest is added)

    def flops_in(name: str, seen=()) -> float:
        total = 0.0
        for op in comps.get(name, []):
            if op.opcode in ("dot", "convolution"):
                total += _matmul_flops(op)
            for callee in re.findall(r"calls=%([\w.\-]+)", op.attrs):
                if callee not in seen:
                    total += flops_in(callee, (*seen, callee))
        return total

    def walk(name: str, times: float, seen=(), totals=totals):
        for op in comps.get(name, []):
            if op.opcode == "while":
                body = re.search(r"body=%([\w.\-]+)", op.attrs)
                cond = re.search(r"condition=%([\w.\-]+)", op.attrs)
                trips = _trips(comps, cond.group(1), body.group(1)) if cond and body else None
                trips = trips or (constants.get(cond.group(1)) if cond else None)
                if trips is None:
                    totals["unknown"] += 1
                if body and body.group(1) not in seen:
                    walk(body.group(1), times * (trips or 1), (*seen, body.group(1)), totals)
                continue
            if op.opcode == "conditional":  # the costliest branch
                branches = re.search(r"branch_computations=\{([^}]*)\}", op.attrs)
                names = re.findall(r"%([\w.\-]+)", branches.group(1) if branches else "") or re.findall(
                    r"(?:true|false)_computation=%([\w.\-]+)", op.attrs)
                costs = []
                for callee in (n for n in names if n not in seen):
                    costs.append(dict.fromkeys(totals, 0))
                    walk(callee, times, (*seen, callee), costs[-1])
                best = max(costs, key=lambda c: (c["seconds"], c["flops"]), default={})
                for key, value in best.items():
                    totals[key] += value
                continue
            if op.opcode in ("call", "async-start"):
                for callee in re.findall(r"(?:to_apply|calls)=%([\w.\-]+)", op.attrs):
                    if callee not in seen:
                        walk(callee, times, (*seen, callee), totals)
                continue
            if op.opcode in _FREE or op.opcode == "custom-call" and _FREE_CALLS.search(op.attrs):
                continue
            moved, hbm = (_written(comps, op, on) + _read(comps, op, on) for on in (False, True))
            if op.opcode.startswith(_COLLECTIVES):
                totals["collective"] += times * _nbytes(op.out)
                continue
            flops = _matmul_flops(op) if op.opcode in ("dot", "convolution") else 0.0
            if op.opcode == "fusion":
                flops = sum(flops_in(c) for c in re.findall(r"calls=%([\w.\-]+)", op.attrs))
                for o in _params(comps, op)[0]:  # an asynchronous collective's, once per channel
                    channel = re.search(r"channel_id=(\d+)", o.attrs)
                    if o.opcode.startswith(_COLLECTIVES) and (channel is None or (name, channel[1]) not in channels):
                        channels.add((name, channel[1]) if channel else None)
                        totals["collective"] += times * _nbytes(o.out)
            if op.opcode == "custom-call" and 'custom_call_target="tpu_custom_call"' in op.attrs:
                totals["custom"] += times
            if ops is not None and totals is top:
                source = re.search(r'op_name="([^"]*)"', op.attrs)
                ops.append(OpCost(op.name, op.opcode, source[1] if source else "", times, times * flops,
                                  times * moved, times * hbm, times * max(flops / peak_flops, moved / hbm_bandwidth)))
            totals["flops"] += times * flops
            totals["bytes"] += times * moved
            totals["hbm"] += times * hbm
            totals["seconds"] += times * max(flops / peak_flops, moved / hbm_bandwidth)

    start = entry if computation is None else computation
    if start is not None:
        walk(start, 1.0, (start,))
    return ProgramCost(totals["flops"], totals["bytes"], totals["collective"], totals["seconds"], totals["unknown"],
                       totals["custom"], totals["hbm"])


@dataclasses.dataclass(frozen=True)
class Loop:
    """A while loop of a compiled program: where it is, its body and condition, its trip count (None:
    not found, e.g. a decoding loop that stops at EOS)."""

    computation: str
    body: str
    condition: str
    trips: int | None


def while_loops(text: str) -> list[Loop]:
    """Every while loop of an optimized HLO module's text, in program order (outer before inner)."""
    comps, _ = _parse(text)
    constants = _constants(text)
    loops = []
    for name, ops in comps.items():
        for op in ops:
            body = re.search(r"body=%([\w.\-]+)", op.attrs) if op.opcode == "while" else None
            cond = re.search(r"condition=%([\w.\-]+)", op.attrs) if body else None
            if body and cond:
                trips = _trips(comps, cond.group(1), body.group(1)) or constants.get(cond.group(1))
                loops.append(Loop(name, body.group(1), cond.group(1), trips))
    return loops


_SLICING = ("dynamic-slice", "slice", "gather")


def _params(comps: dict, fusion: _Op) -> tuple[list, dict]:
    callee = re.search(r"calls=%([\w.\-]+)", fusion.attrs)
    body = comps.get(callee.group(1), []) if callee else []
    return body, {int(o.attrs): o.name for o in body if o.opcode == "parameter" and o.attrs.isdigit()}


def _reads(comps: dict, body: list, param: str, full: float, depth: int = 0) -> float:
    """Bytes read of parameter ``param`` of a fused computation: the slices taken of it when it is
    only sliced (through nested fusions too), none when it is only passed through (an element of the
    root tuple: an async collective's buffers, threaded through the fusions that overlap it) or
    gathered by a collective (counted as collective bytes), else ``full``."""
    total, updated = 0.0, False
    for user in (o for o in body if param in o.args):
        if user.opcode.startswith(_COLLECTIVES) or (user is body[-1] and _async_collective(body)):
            updated = True
        elif user.opcode == "dynamic-update-slice" and user.args[0] == param and user.args.count(param) == 1:
            updated = True  # a buffer updated in place: the update's bytes are the write
        elif user.opcode in _SLICING and user.args[0] == param:
            total += _nbytes(user.out)
        elif user.opcode == "fusion" and depth < 4:
            inner, params = _params(comps, user)
            total += sum(_reads(comps, inner, params[i], full, depth + 1)
                         for i, a in enumerate(user.args) if a == param and i in params)
        else:
            return full
    return min(total, full) if total or updated else full


def _read(comps: dict, op: _Op, hbm: bool = False) -> float:
    """Bytes an operation reads (``hbm``: from HBM): a fusion's (``_fusion_reads``), an in-place update's
    update, an asynchronous slice's slice (of its source, in the source's memory), else its operands."""
    if op.opcode == "fusion":
        return _fusion_reads(comps, op, hbm)
    if op.opcode == "dynamic-update-slice":
        return _nbytes(op.operands[1:], hbm)
    if op.opcode == "slice-start" and len(op.out) >= 2 and op.operands:
        return _nbytes([(*op.out[-2][:2], op.operands[0][2])], hbm)
    return _nbytes(op.operands, hbm)


def _written(comps: dict, op: _Op, hbm: bool = False) -> float:
    """Bytes an operation writes (``hbm``: into HBM): an in-place update (dynamic-update-slice, also as
    a fusion's root) writes its update, a copy-start its destination (its result's first element;
    the second is its source), a slice-start its slice (its result's ((source), slice, context)),
    anything else its whole result."""
    root = op
    if op.opcode == "fusion":
        body, _ = _params(comps, op)
        root = body[-1] if body else op
        if _async_collective(body):  # of the root's elements, what the fusion computes
            named = {o.name: o for o in body}
            parts = [named[a] for a in root.args if a in named] if root.opcode == "tuple" else []
            return sum(_nbytes(o.out, hbm) for o in parts if o.opcode not in ("parameter", "custom-call")
                       and not o.opcode.startswith(_COLLECTIVES))
    if root.opcode == "dynamic-update-slice" and len(root.operands) >= 2:
        return 0.0 if hbm and any(a[2] for a in op.out[:1]) else _nbytes(root.operands[1:2])
    if op.opcode == "slice-start" and len(op.out) >= 2:
        return _nbytes(op.out[-2:-1], hbm)
    return _nbytes(op.out[:1] if op.opcode == "copy-start" else op.out, hbm)


def _async_collective(body: list) -> bool:
    """Whether a fused computation is one of an asynchronous collective's (the TPU compiler's: a
    collective started or finished beside other work, its buffers passed through the root, a tuple
    or a custom-call): its collective's bytes are collective bytes, its pass-through buffers no bytes."""
    return bool(body) and body[-1].opcode in ("tuple", "custom-call") and any(
        o.opcode.startswith(_COLLECTIVES) for o in body)


def _fusion_reads(comps: dict, op: _Op, hbm: bool = False) -> float:
    """Bytes a fusion reads (``hbm``: from HBM): a parameter only sliced inside it (a layer's weights
    out of the stacked ones) counts the slices it reads, any other its whole size."""
    body, params = _params(comps, op)
    total = 0.0
    for i, name in enumerate(op.args):
        arrays = op.sources.get(name, [])
        if hbm and arrays and all(a[2] for a in arrays):
            continue  # in on-chip memory
        full = _nbytes(arrays, hbm)
        total += _reads(comps, body, params[i], full) if i in params else full
    return total


def _trips(comps: dict, condition: str, body: str) -> int | None:
    """Trips of a loop whose condition is ``counter < N`` and whose body adds a constant step to the
    counter (from 0): ceil(N / step); None for any other shape."""
    cond = comps.get(condition, [])
    named = {o.name: o for o in cond}
    root = cond[-1] if cond else None
    if root is None or root.opcode != "compare" or "direction=LT" not in root.attrs or len(root.args) != 2:
        return None
    counter, bound = (named.get(a) for a in root.args)
    if counter is None or bound is None or counter.opcode != "get-tuple-element" or bound.opcode != "constant":
        return None
    index = re.search(r"index=(\d+)", counter.attrs)
    ops = comps.get(body, [])
    by_name = {o.name: o for o in ops}
    root = ops[-1] if ops else None  # the body's result tuple: its element ``index`` is the next counter
    if index is None or root is None or root.opcode != "tuple" or int(index.group(1)) >= len(root.args):
        return None
    step_op = by_name.get(root.args[int(index.group(1))])
    while step_op is not None and step_op.opcode in ("copy", "bitcast") and step_op.args:
        step_op = by_name.get(step_op.args[0])
    if step_op is None or step_op.opcode != "add" or len(step_op.args) != 2:
        return None
    steps = [by_name.get(a) for a in step_op.args]
    constant = next((o for o in steps if o is not None and o.opcode == "constant"), None)
    try:
        step, n = int(constant.attrs), int(bound.attrs)
    except (AttributeError, ValueError):
        return None
    return -(-n // step) if step > 0 else None


def _constants(text: str) -> dict:
    """Loop condition -> its trip bound: the largest integer constant the condition compares against
    (directly or inside a fusion it calls)."""
    comps_consts: dict[str, list[int]] = {}
    calls: dict[str, list[str]] = {}
    current = None
    for line in text.splitlines():
        m = _HEADER.match(line)
        if m:
            current = m.group(1)
            comps_consts[current], calls[current] = [], []
            continue
        if current is None:
            continue
        c = re.search(r"= [su](?:32|64)\[\]\S* constant\((-?\d+)\)", line)
        if c:
            comps_consts[current].append(int(c.group(1)))
        calls[current] += re.findall(r"calls=%([\w.\-]+)", line)

    def bound(name, depth=0):
        values = list(comps_consts.get(name, []))
        if depth < 3:
            for callee in calls.get(name, []):
                b = bound(callee, depth + 1)
                if b is not None:
                    values.append(b)
        values = [v for v in values if v > 0]
        return max(values) if values else None

    conditions = set(re.findall(r"condition=%([\w.\-]+)", text))
    return {c: bound(c) for c in conditions}
