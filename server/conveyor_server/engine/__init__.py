"""The engine room: spec -> plan -> stages and ops -> batches -> checkpoint state.

Holds the in-process ``Pipeline`` (``pipeline.py``), the plan of a spec (``plan.py``: source
stages, per-sample segments and per-batch steps), running a batch (``segments.py``,
``batch_work.py``), the source stages (``stages/``: readers, random ops, external sources;
the callables those may name: ``external_sources.py``), the readers
beyond the file reader (``readers/``: numpy and webdataset), the operators
(``ops/``, registered per sample or per batch), checkpoint blobs (``checkpoint.py``), file
lists (``file_list.py``), data roots and reading files beneath them (``data_roots.py``,
``data_files.py``), the size an image's header declares (``image_header.py``,
``image_pages.py``, ``header_bytes.py``), the data set's identity and file listings
(``data_identity.py``, ``listings.py``), keyed random numbers (``keyed_random.py``),
limits (``limits.py``) and the bounds on specs (``spec_bounds.py``), the behaviour probe
(``behaviour/``), the engine's identity built from it (``engine_id.py``) and devices
(``devices.py``).

Imports: the ``conveyor`` client package (spec, schema, errors, generated messages) and
libraries; no other room of ``conveyor_server`` (service, store, app), so the engine runs in
a trainer's process without gRPC servers or Redis.

Importing the package chooses OpenCV's CPU code paths before any of its modules loads
OpenCV (``cpu_paths.py``: by default AVX-512 nodes compute what AVX2 nodes compute).
"""

from conveyor_server.engine import cpu_paths

cpu_paths.pin()
