"""Identity: what computes a pipeline's bytes, and the checkpoint that records it.

The behaviour digests measured by running every operator's probe (``behaviour/``), OpenCV's
CPU paths chosen before it loads (``cpu_paths.py``), the GPU path (``gpu_path.py``: the GPU,
its driver, CUDA and the decoder libraries), the engine id built from them
(``engine_id.py``) and the checkpoint blob (``checkpoint.py``): versioned, checksummed,
holding the spec, each stage's state and the digests of the keys the pipeline uses.

Imports: ``ops`` (the operators the probes run, and the decoder's library versions),
``device`` (which devices to probe), and the foundations ``keyed_random`` and ``catalog``.
"""
