"""The engine in process: operators, readers, stages, plans, identity and the GPU path's
CPU-verifiable parts. ``golden/`` holds the behaviour digests, ``fixtures/`` checkpoints
written by earlier versions."""
