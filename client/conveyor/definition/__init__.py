"""The definition contract: what a pipeline is, written down without running it.

- ``spec.py``: the ``PipelineSpec`` of a definition, its fingerprint and checkpoint seed;
- ``graph.py``: the graph a ``@pipeline_def`` function records, operator by operator;
- ``pipeline.py``: the pipeline a ``@pipeline_def`` function returns, run in process;
- ``decorator.py``: ``pipeline_def`` and the pipeline arguments it takes;
- ``expressions.py``: DALI's ``fn.math`` functions over the graph's expression operators;
- ``external_source.py``, ``source_closures.py``: what an external source is given and how
  its callable is named, or described, so another process finds it again;
- ``unsupported.py``: what DALI has and Conveyor does not, said as one error;
- ``tfrecord.py``, ``crc32c.py``: TFRecord's feature types and index tools, its checksum;
- ``normalization.py``: the arithmetic of ``crop_mirror_normalize``, shared by the server's
  operator and the trainer-side helper;
- ``schemas/``: every operator's one declaration.

Imports: ``conveyor.errors``, ``conveyor.tensor_list``, the generated messages
(``conveyor.v1``) and libraries; never gRPC, ``transport``, ``remote``, ``client`` or an
adapter, so a trainer or the engine that only defines or runs pipelines in process never
loads the transport.
"""
