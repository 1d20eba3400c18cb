"""TPU targets by MaxText's names (v4-8, v5e-8, v5e-256, v5p-8, v6e-8, ...): their devices, made by
libtpu's compiler on any host (no TPU needed), and each chip's memory, peak bf16 FLOPs and HBM
bandwidth, so that a step can be compiled ahead of time for the hardware a run will rent.

    t = target("v5e-8")                  # 8 v5e chips on one host, 16 GiB each
    mesh = make_mesh(1, target_devices(t))
    jax.jit(step).lower(<abstract arguments sharded on mesh>).compile().memory_analysis()

Names: v5e-N / v6e-N count chips (N in 1, 4, 8, ..., 256), v4-N / v5p-N count TensorCores (two per
chip, one megacore device per chip), as Cloud TPU and MaxText (accelerator_to_spec_map.py) name
them; ``num_slices`` > 1 joins that many slices over the data-center network. v5e-8 and v6e-8 are
one host of 8 chips; larger v5e / v6e slices have 4 chips per host, v4 / v5p slices 4 per host.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import os

from lmprobe.errors import LmprobeError
from lmprobe.log import tpu_chips_here

TPU_EXTRA = "pip install 'lmprobe-jax[tpu]' (or libtpu alone: pip install libtpu)"


@dataclasses.dataclass(frozen=True)
class Chip:
    """One TPU generation, per device (a chip; v4 / v5p as megacore): the HBM the TPU compiler lets a
    program use (its RESOURCE_EXHAUSTED message's 'available HBM'; v5p: the chip's 95 GiB), peak FLOPs
    and bandwidth from Cloud TPU's documentation."""

    prefix: str  # libtpu's topology prefix
    hbm_bytes: int
    peak_flops: float  # bf16 FLOP/s
    hbm_bandwidth: float  # bytes/s
    cores_per_name: int  # how many units of the name's number one device is (v4-8: 2 cores a chip)


GiB = 2**30
CHIPS = {
    "v4": Chip("v4", int(30.75 * GiB), 275e12, 1.2e12, 2),
    "v5p": Chip("v5", 95 * GiB, 459e12, 2.765e12, 2),
    "v5e": Chip("v5e", int(15.75 * GiB), 197e12, 0.819e12, 1),
    "v6e": Chip("v6e", int(31.25 * GiB), 918e12, 1.64e12, 1),
}
# chips -> the slice's shape (MaxText's topologies)
_SHAPES_2D = {1: (1, 1), 4: (2, 2), 8: (2, 4), 16: (4, 4), 32: (4, 8), 64: (8, 8), 128: (8, 16), 256: (16, 16)}
_SHAPES_3D = {4: (2, 2, 1), 8: (2, 2, 2), 16: (2, 2, 4), 32: (2, 4, 4), 64: (4, 4, 4), 128: (4, 4, 8),
              192: (4, 4, 12), 256: (4, 8, 8), 512: (8, 8, 8), 768: (8, 8, 12), 1024: (8, 8, 16),
              2048: (8, 16, 16)}


@dataclasses.dataclass(frozen=True)
class Target:
    """A TPU slice (or ``num_slices`` of them) by name; figures per device."""

    name: str  # e.g. 'v5e-8'
    chip: Chip
    shape: tuple  # chips along each axis of one slice
    num_slices: int = 1

    @property
    def topology(self) -> str:
        """libtpu's name of one slice, e.g. 'v5e:2x4'."""
        return f"{self.chip.prefix}:{'x'.join(map(str, self.shape))}"

    @property
    def chips_per_slice(self) -> int:
        n = 1
        for s in self.shape:
            n *= s
        return n

    @property
    def devices(self) -> int:
        return self.chips_per_slice * self.num_slices

    @property
    def host_bounds(self) -> tuple:
        """Chips per host along each axis: one host for up to 8 v5e / v6e chips, else 2 x 2."""
        if self.chips_per_slice == 1:
            return (1, 1, 1)
        if len(self.shape) == 2 and self.chips_per_slice == 8:
            return (2, 4, 1)
        return (2, 2, 1)

    @property
    def hosts(self) -> int:
        per = 1
        for b in self.host_bounds:
            per *= b
        return self.devices // per

    @property
    def wrap(self) -> tuple:
        """Torus wrap-around per axis, as MaxText's table has it."""
        if len(self.shape) == 3:
            return (self.chips_per_slice >= 64,) * 3
        return (self.shape[0] >= 16, self.shape[1] >= 16, False)

    @property
    def label(self) -> str:
        return self.name + (f" x {self.num_slices} slices" if self.num_slices > 1 else "")


def known_names() -> list[str]:
    names = []
    for gen, chip in CHIPS.items():
        shapes = _SHAPES_3D if chip.cores_per_name == 2 else _SHAPES_2D
        names += [f"{gen}-{n * chip.cores_per_name}" for n in shapes]
    return names


def target(name: str, num_slices: int = 1) -> Target:
    """The Target named ``name`` ('v5e-8'); one LmprobeError listing the known names otherwise."""
    gen, _, count = str(name).strip().lower().partition("-")
    chip = CHIPS.get(gen)
    shapes = None if chip is None else (_SHAPES_3D if chip.cores_per_name == 2 else _SHAPES_2D)
    chips = int(count) // chip.cores_per_name if chip is not None and count.isdigit() else None
    if shapes is None or chips not in shapes or int(count) % chip.cores_per_name:
        raise LmprobeError(f"`target={name}` is not a TPU slice lmprobe knows: use one of {', '.join(known_names())}")
    if num_slices < 1:
        raise LmprobeError(f"`num_slices={num_slices}`: give 1 or more slices")
    return Target(f"{gen}-{count}", chip, shapes[chips], num_slices)


def libtpu_available() -> bool:
    path = os.environ.get("TPU_LIBRARY_PATH")
    return bool(path and os.path.isfile(path)) or importlib.util.find_spec("libtpu") is not None


def target_devices(t: Target) -> list:
    """The devices of ``t`` from libtpu's compiler (compile-only: they run nothing)."""
    prepare_host(t)
    from jax.experimental import topologies

    desc = topologies.get_topology_desc(
        platform="tpu", topology_name=t.topology, chip_config_name="megacore" if t.chip.cores_per_name == 2
        else "default", chips_per_host_bounds=t.host_bounds, num_slices=t.num_slices, wrap=t.wrap)
    return list(desc.devices)


def prepare_host(t: Target) -> None:
    """Before jax starts its backends: libtpu present (else one line naming the extra) and, on a host
    without TPU chips, libtpu told it only compiles (its lockfile shared, the host's role given; else it
    looks the role up when any device is first touched and says so on stderr)."""
    if not libtpu_available():
        raise LmprobeError(f"`target={t.name}` compiles for TPUs with libtpu, which is not installed: {TPU_EXTRA}")
    if not tpu_chips_here():
        # No TPU here: libtpu only compiles. Let it load beside another process's libtpu (its lockfile)
        # and tell it the host's role, which it otherwise looks up and complains about on stderr.
        accelerator = t.name.replace("v5e-", "v5litepod-")
        for key, value in (("ALLOW_MULTIPLE_LIBTPU_LOAD", "1"), ("TPU_SKIP_MDS_QUERY", "1"),
                           ("TPU_ACCELERATOR_TYPE", accelerator), ("TPU_WORKER_HOSTNAMES", "localhost"),
                           ("TPU_WORKER_ID", "0")):
            os.environ.setdefault(key, value)
