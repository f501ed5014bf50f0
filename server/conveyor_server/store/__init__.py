"""The store room: pipeline names and checkpoints in Redis.

Holds the ``Store`` (``store.py``) with its Lua scripts (``scripts/*.lua``, read once), the
forms of pipeline names and checkpoint ids (``ids.py``), and the records it reads back,
owners and checkpoints with their creators (``records.py``); the connection modes:
standalone, TLS, Sentinel, Cluster (``connect.py``), and the embedded ``redis-server`` the
server starts when it is given no Redis (``redis_process.py``), which ends with the
process that started it (``parent_death.py``) and runs one at a time in its directory
(``owner_lock.py``); and riding through a failover: a call that fails as the primary
changes is tried again for a bounded time, within the caller's deadline (``failover.py``).

Imports: the ``conveyor`` client package (errors, shared channel helpers) and libraries;
no other room of ``conveyor_server``.
"""
