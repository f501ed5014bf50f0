"""Data: the files pipelines read, and what a checkpoint knows of them.

The data roots a server serves and resolving paths beneath them without following a link
out (``roots.py``) beneath their directories opened once (``root_handles.py``), reading
files there (``files.py``) and a batch's files in one call (``file_batch.py``, by the
compiled reader ``batch_read.c`` or its Python twin ``batch_read.py``), a reader's file
list checked one entry at a time (``file_list.py``), the data set's identity digested into
checkpoints (``identity.py``) and the store of listings by digest that names the first
changed file on a refused restore (``listings.py``). Object storage (``s3://``, ``gs://``,
``az://``): its URLs and roots (``object_urls.py``), each bucket's client as the settings
and the store's environment make it (``object_clients.py``, with a named profile of the
shared AWS files: ``aws_profile.py``), the requests that list and read it, retried, one
code path for the three stores (``object_store.py``, obstore), their failures as errors
(``object_errors.py``), a file list of objects
(``object_list.py``), objects and byte ranges fetched ahead of the reads
(``fetch_ahead.py``) and the server's disk cache of objects its pipelines share
(``node_cache.py``).

Imports: ``admission`` (the file size limit).
"""
