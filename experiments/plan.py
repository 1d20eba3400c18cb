"""Memory plan before loading: parameter bytes per device, the scoring (or embedding) step's
memory per device, and the largest batch per length bucket that fits, from config.json alone.

    python -m experiments.plan --model=opt-13b --dtype=bfloat16 --devices=8 --hbm=16GiB
    python -m experiments.plan --model=opt-13b --dtype=bfloat16 --devices=1 --hbm=80GB
    python -m experiments.plan --model=llama-2-7b --devices=8 --sharding=tp --model_parallel=8 --hbm=16GiB

--devices=N plans for N devices: the machine's own when it has N, else N simulated CPU devices
(this script sets --xla_force_host_platform_device_count=N before jax starts). --hbm is the
memory per device (16GiB, 32GiB, 80GB, 80e9); by default the devices' own limit, and none on
CPU (then the plan only reports). No weight is read: the configs of the papers' models ship
with lmprobe, so plans work offline. Exits with status 2 and the flag that fixes it when the
model does not fit.
"""

from __future__ import annotations

import argparse
import os
import re
import sys


def simulate_devices(argv=None) -> int | None:
    """Read --devices from ``argv`` and, before jax starts, give the CPU backend that many devices."""
    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--devices", type=int)
    n = pre.parse_known_args(argv)[0].devices
    if n is None or n < 1:
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


def _add(p: argparse.ArgumentParser, flag: str, **kwargs) -> None:
    """Add a plan-only flag unless the common parser already has it."""
    if flag not in p._option_string_actions:
        p.add_argument(flag, **kwargs)


def build_parser():
    from experiments.cli import parser

    p = parser("Memory plan before loading: parameters, activations and the largest batch per "
               "bucket per device, from config.json alone", default_model="opt-13b")
    _add(p, "--devices", type=int, default=None,
         help="plan for this many devices (the machine's own if it has as many, else simulated CPU devices)")
    _add(p, "--hbm", default=None,
         help="memory per device: 16GiB, 32GiB, 80GB, 80e9 (default: the devices' own limit; none on CPU)")
    _add(p, "--max_length", type=int, default=None,
         help="longest bucket (default: the model's context)")
    _add(p, "--max_tokens", type=int, default=None,
         help="cap on tokens per batch per device (rows = min(batch_size, max_tokens // length))")
    _add(p, "--buckets", default="128,512,2048",
         help="bucket lengths to search for the largest batch (plus --max_length), comma-separated")
    _add(p, "--json", default=None, help="also write the plan as JSON to this file")
    return p


def _devices(n: int | None):
    """(devices, simulated): the machine's own N devices, else N CPU devices standing in for them."""
    import jax

    from lmprobe.errors import LmprobeError

    if n is None:
        return jax.devices(), False
    if n < 1:
        raise LmprobeError(f"--devices={n}: give a positive number of devices")
    if jax.device_count() == n:
        devices = jax.devices()
        return devices, devices[0].platform == "cpu"
    cpus = jax.devices("cpu")
    if len(cpus) < n:
        raise LmprobeError(
            f"--devices={n}: only {len(cpus)} CPU devices could be made because jax started before "
            f"experiments.plan could ask for more: run it as python -m experiments.plan, or set "
            f"XLA_FLAGS=--xla_force_host_platform_device_count={n}")
    return cpus[:n], True


def _dtype(name: str, simulated: bool, platform: str):
    import jax.numpy as jnp

    if name == "auto":  # the run's own rule (bfloat16 on accelerators), planning for accelerators when simulating
        name = "float32" if platform == "cpu" and not simulated else "bfloat16"
    return jnp.dtype(name)


def main(argv=None):
    simulate_devices(argv)
    from experiments.cli import main_guard

    main_guard(_main)(argv)


def _main(argv=None):
    import json

    from lmprobe.engine.mesh import make_mesh
    from lmprobe.engine.plan import check_fits, device_hbm, parse_bytes, plan
    from lmprobe.errors import LmprobeError

    args = build_parser().parse_args(argv)
    devices, simulated = _devices(args.devices)
    mesh = make_mesh(args.model_parallel, devices)
    hbm = parse_bytes(args.hbm) if args.hbm is not None else device_hbm(devices)
    try:
        buckets = [int(b) for b in args.buckets.split(",") if b.strip()]
    except ValueError:
        raise LmprobeError(f"--buckets={args.buckets} is not a comma-separated list of lengths") from None
    kwargs = dict(dtype=_dtype(args.dtype, simulated, devices[0].platform), mesh=mesh, strategy=args.sharding,
                  batch_size=args.batch_size, max_length=args.max_length, max_tokens=args.max_tokens,
                  hbm_bytes=hbm, offline=args.offline or None)
    result = plan(args.model, buckets=buckets, **kwargs)
    if simulated:
        n = len(devices)
        result.notes.append(f"{n} device{'s' * (n > 1)} simulated on CPU (--devices={n})")
    print(result.table())
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(result.to_dict(), f, indent=2, default=str)
    if result.fits is False:
        check_fits(args.model, **kwargs)  # raises, naming the flag that fixes it


if __name__ == "__main__":
    main()
