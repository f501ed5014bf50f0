"""What this server's engine computes, measured: its behaviour digests.

At start a server runs every operator, random source and reader order over a small
canonical probe set (each operator's ``op_probe`` or ``source_probe``, in the operator's
module: every interpolation, dtype and code path, on each device it has) and hashes the
outputs per behaviour key (``rotate[linear]@cpu``). A
checkpoint records the digests of the keys its pipeline uses; a restore on a server whose
digest differs for one of them is refused, naming the operator (``engine_id.py``). Other
CPUs, library builds or GPU models that compute the same bytes keep checkpoints valid.

Imports: the engine's operators, stages and readers (through ``catalog``), and devices.
"""
