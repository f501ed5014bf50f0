"""JAX helpers for trainers (JAX: the client's ``jax`` extra, ``pip install './client[jax]'``
from a clone).

- ``ConveyorIterator``: a pipeline, in this process or on a server, as an iterator of
  ``jax.Array`` batches, placed on a device or sharded over the process's devices, whose
  ``get_state()`` / ``set_state()`` are the trainer's position (``iterator.py``).
- ``batch_sharding``: the sharding that splits a batch's first axis over devices.

DALI's names (``DALIGenericIterator``, ``data_iterator``) are ``conveyor.dali.plugin.jax``.
"""

from conveyor.jax.iterator import ConveyorIterator, batch_sharding

__all__ = ["ConveyorIterator", "batch_sharding"]
