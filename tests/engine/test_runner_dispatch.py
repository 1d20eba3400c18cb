"""Runner.run's pipelined dispatch on a CPU mesh of several devices: many executions of a program with
collectives in flight deadlock XLA's CPU client (it aborts the process after 40 s), so a call reads back
once ``cpu_mesh_in_flight`` batches are in flight. Run in a subprocess: the failure is an abort. (The same
job without the cap, ``cpu_mesh_in_flight`` 1 << 30, aborts in an all-gather's rendezvous after 40 s.)"""

import os
import subprocess
import sys
import textwrap

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
JOB = textwrap.dedent("""
    import sys
    import jax, jax.numpy as jnp, numpy as np
    from flax import nnx
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
    from lmprobe.engine.runner import Runner

    mesh = Mesh(np.array(jax.devices()).reshape(-1, 1), ("data", "model"))
    runner = Runner(nnx.Linear(2, 2, rngs=nnx.Rngs(0)), mesh, batch_size=4, max_tokens=None, max_length=8)
    runner.cpu_mesh_in_flight = int(sys.argv[1])
    step = jax.jit(lambda x: jnp.tanh(x @ x.T).sum(0), out_shardings=NamedSharding(mesh, P()))  # an all-gather
    x = jax.device_put(jnp.ones((64, 256)), NamedSharding(mesh, P("data")))
    for _ in range(3):
        out = runner.run(step, ((x,) for _ in range(400)))
    assert len(out) == 400 and np.allclose(out[-1], out[0])
    print("done", flush=True)
""")


def _run(in_flight: int, timeout: float) -> subprocess.CompletedProcess:
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "JAX_NUM_CPU_DEVICES": "2",
           "PYTHONPATH": os.pathsep.join(filter(None, [REPO, os.environ.get("PYTHONPATH")]))}
    env.pop("XLA_FLAGS", None)
    return subprocess.run([sys.executable, "-c", JOB, str(in_flight)], capture_output=True, text=True,
                          timeout=timeout, env=env, cwd=REPO)


def test_1200_dispatches_with_collectives_on_a_2_device_cpu_mesh_finish():
    done = _run(16, timeout=120)
    assert done.returncode == 0 and "done" in done.stdout, done.stderr[-3000:]

