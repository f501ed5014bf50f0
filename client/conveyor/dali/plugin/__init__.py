"""DALI's ``nvidia.dali.plugin``: the framework iterators over Conveyor pipelines.

``conveyor.dali.plugin.pytorch`` holds ``DALIGenericIterator``,
``DALIClassificationIterator``, ``LastBatchPolicy`` and ``feed_ndarray`` (and
``experimental.proxy``, importable, refused when used);
``conveyor.dali.plugin.jax`` DALI's JAX ``DALIGenericIterator``, ``data_iterator`` and
``peekable_data_iterator`` (it imports JAX);
``conveyor.dali.plugin.base_iterator`` the epoch accounting they share (no framework).
They take in-process pipelines (what a ``@pipeline_def`` function returns) and
``RemotePipeline``s alike. Importing them loads no gRPC; the PyTorch one loads no
framework either (torch is imported when an iterator is made).
"""
