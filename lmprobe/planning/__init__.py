"""Planning apart from running: what a model needs before it runs, from its config alone. The memory plan
(plan: parameter bytes, compiled steps' memory, the largest batch per bucket), compile-only runs of a
method's own queries (aot: a Scorer whose steps compile and answer zeros), the TPU compiler's cost of a
compiled program (hlo_cost) and the TPU slices it compiles for without a TPU (targets). Planning uses the
engine (its steps, Runner, Scorer and load-time memory check, lmprobe.engine.memory); the engine never
imports planning."""
