"""Memory plan before loading: parameter bytes per device, the scoring (or embedding) step's
memory per device, and the largest batch per length bucket that fits, from config.json alone.

    python -m experiments.plan --model=opt-13b --dtype=bfloat16 --devices=8 --hbm=16GiB
    python -m experiments.plan --model=opt-13b --dtype=bfloat16 --devices=1 --hbm=80GB
    python -m experiments.plan --model=llama-2-7b --devices=8 --sharding=tp --model_parallel=8 --hbm=16GiB
    lmprobe plan --model=pythia-12b --devices=4 --hbm=24GiB --buckets=512,2048 --json=plan.json
    lmprobe plan --model=opt-13b --target=v5e-8 --max_length=2048        # compile before you rent

--target=NAME compiles for a TPU slice by its Cloud TPU / MaxText name (v4-8, v5e-8, v5e-256, v5p-8,
v6e-8, ...; --num_slices joins slices) with libtpu's compiler on this host, no TPU needed (pip install
'lmprobe-jax[tpu]'): the TPU compiler's memory verdict per bucket (RESOURCE_EXHAUSTED: does not fit), the
chip's HBM unless --hbm, and each step's compiled FLOPs against useful FLOPs and its estimated time
(the TPU cost model's estimate, not a measurement).

--devices=N plans for N devices: the machine's own when it has N, else N simulated CPU devices
(this script sets --xla_force_host_platform_device_count=N before jax starts). --hbm is the
memory per device (16GiB, 32GiB, 80GB, 80e9); by default the devices' own limit, and none on
CPU (then the plan only reports). No weight is read: the configs of the papers' models ship
with lmprobe, so plans work offline. Exits with status 2 and the flag that fixes it when the
model does not fit. --revision plans the config.json of that hub revision (from the cache, else
downloaded alone unless --offline).
"""

from __future__ import annotations

import argparse
import os
import re
import sys


def simulate_devices(argv=None) -> int | None:
    """Read --devices from ``argv`` (or its --config file) and, before jax starts, give the CPU
    backend that many devices."""
    pre = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    pre.add_argument("--devices")
    pre.add_argument("--config")
    known = pre.parse_known_args(argv)[0]
    try:
        n = int(known.devices if known.devices is not None or not known.config else _from_config(known.config))
    except (TypeError, ValueError):  # absent, or not a number: the real parser says so
        return None
    if n < 1:
        return n
    if "jax" not in sys.modules:
        flags = re.sub(r"--xla_force_host_platform_device_count=\S+", "", os.environ.get("XLA_FLAGS", ""))
        os.environ["XLA_FLAGS"] = f"{flags} --xla_force_host_platform_device_count={n}".strip()
    else:  # imported but perhaps not started: the config option still applies then
        import jax

        try:
            jax.config.update("jax_num_cpu_devices", n)
        except Exception:
            pass
    return n


def _from_config(path: str):
    """'devices' of a YAML / JSON config file; None when it cannot tell (the real parser reports)."""
    try:
        import yaml

        with open(path, encoding="utf-8") as f:
            data = yaml.safe_load(f)
        return data.get("devices") if isinstance(data, dict) else None
    except Exception:  # noqa: BLE001 - the real parser reads the file again and says what is wrong
        return None


def build_parser():
    import dataclasses

    from lmprobe.cli import common, flags

    @dataclasses.dataclass(frozen=True)
    class FrontEnd:
        model: str = "opt-13b"  # alias, hub id, local directory, config.json or .gguf (no weight is read)
        devices: int | None = None  # plan for this many devices (the machine's own if it has them, else simulated)
        hbm: str | None = None  # memory per device: 16GiB, 32GiB, 80GB, 80e9 (none: the devices' own; none on CPU)
        max_length: int | None = None  # longest bucket (none: the model's context)
        # cap on tokens per batch per device (rows = min(batch_size, max_tokens // length))
        max_tokens: int | None = None
        buckets: tuple[int, ...] = (128, 512, 2048)  # bucket lengths to search for the largest batch (and --max_length)
        json: str | None = None  # also write the plan as JSON to this file
        target: str | None = None  # compile for this TPU slice (v4-8, v5e-8, v5e-256, v5p-8, v6e-8, ...); no TPU needed
        num_slices: int = 1  # slices of --target joined over the data-center network

    p = common.parser(__doc__, "plan")
    p.compiles = True  # common.parse prepares libtpu for --target before jax starts
    common.front_end(p, FrontEnd, convert={"max_tokens": flags.bounded(1), "buckets": flags.bounded(1),
                                        "num_slices": flags.bounded(1)})
    return p


def main(argv=None):
    simulate_devices(argv)
    from lmprobe.cli.common import main_guard

    main_guard(_main)(argv)


def _main(argv=None):
    import json
    import time

    from lmprobe.cli import common
    from lmprobe.engine.memory import check_fits, device_hbm
    from lmprobe.engine.mesh import make_mesh
    from lmprobe.errors import LmprobeError
    from lmprobe.planning.plan import parse_bytes, plan, plan_devices, plan_dtype
    from lmprobe.planning.targets import target, target_devices

    args = common.parse(build_parser(), argv)  # also: library errors name this front end's flags
    slice_ = None if args.target is None else target(args.target, args.num_slices)
    if slice_ is not None and args.devices is not None:
        raise LmprobeError(f"--devices={args.devices} with --target={args.target}: the target sets the devices, "
                           "drop one of them")
    devices, simulated = (target_devices(slice_), False) if slice_ is not None else plan_devices(args.devices)
    mesh = make_mesh(args.model_parallel, devices)
    hbm = parse_bytes(args.hbm) if args.hbm is not None else (
        slice_.chip.hbm_bytes if slice_ is not None else device_hbm(devices))
    model = args.model
    kwargs = dict(dtype=plan_dtype(args.dtype, devices[0].platform, simulated), mesh=mesh, strategy=args.sharding,
                  batch_size=args.batch_size, max_length=args.max_length, max_tokens=args.max_tokens,
                  hbm_bytes=hbm, offline=True if args.offline else None, revision=args.revision)
    started = time.perf_counter()
    result = plan(model, buckets=list(args.buckets), target=slice_, **kwargs)
    if slice_ is not None:
        result.notes.append(f"compiled by the TPU compiler (libtpu) for {slice_.label}: {slice_.devices} chips on "
                            f"{slice_.hosts} host{'s' * (slice_.hosts > 1)}; planned in "
                            f"{time.perf_counter() - started:.0f} s")
    if simulated:
        n = len(devices)
        result.notes.append(f"{n} device{'s' * (n > 1)} simulated on CPU (--devices={n})")
    print(result.table())
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(result.to_dict(), f, indent=2, default=str)
    if result.fits is False:
        fit = check_fits(model, **kwargs)  # raises, naming the flag that fixes it, unless fewer rows fit
        if fit is not None and fit.max_tokens is not None:
            print(f"fewer rows fit at {fit.max_length} tokens: a run caps its batches at {fit.max_tokens} tokens per "
                  f"device ({fit.max_tokens // fit.max_length} rows of {fit.max_length} tokens) by itself")
