"""The engine room: spec -> plan -> ops -> batches -> checkpoint state.

Its top holds the run loop, one job a module:

- ``pipeline.py``: the in-process ``Pipeline``, the engine's public face, assembling the
  parts below;
- ``plan.py``: the plan of a spec (source stages, per-sample segments, per-batch steps);
- ``batch_queue.py``: the batches in order, those computed ahead (prefetch) and the next
  handed out;
- ``segments.py``, ``batch_work.py``: running one batch's per-sample and per-batch work;
- ``staging.py``, ``gpu_staging.py``: a batch's outputs staged into the output ring as it
  becomes ready, copied out of the GPU;
- ``checkpoint_writer.py``: what a pipeline's checkpoint records at a position.

Beside them two foundations every room may use: keyed random numbers
(``keyed_random.py``) and the discovery of every registered operator, reader and probe
(``catalog.py``).

The rooms beneath, each saying in its ``__init__`` what it holds and may import:

- ``admission/``: what a pipeline may ask for (the limits, the bounds on a spec);
- ``data/``: the data roots, the files beneath them, file lists, their listings and identity;
- ``device/``: accelerators, CUDA streams and the pinned output ring;
- ``ops/``: the operators by kind (geometry, decode, colour, normalize), their GPU forms
  (``ops/cuda``) and the behaviour probes' contract and inputs (``ops/probes``);
- ``stages/``: the source stages (the file reader's order, random draws, external sources),
  where they stand at the start and at any step, and a data-parallel rank's share of the
  global batches;
- ``readers/``: every reader, each a listing, a sample source and an identity;
- ``identity/``: what computes the bytes (behaviour digests, CPU and GPU paths, the engine
  id) and the checkpoint blob that records it.

Imports: the ``conveyor`` client package's definition contract (spec, schema, errors,
generated messages) and libraries; no other room of ``conveyor_server`` (service, store,
app), so the engine runs in a trainer's process without gRPC servers or Redis.

Importing the package chooses OpenCV's CPU code paths before any of its modules loads
OpenCV (``identity/cpu_paths.py``: by default AVX-512 nodes compute what AVX2 nodes
compute).
"""

from conveyor_server.engine.identity import cpu_paths

cpu_paths.pin()
