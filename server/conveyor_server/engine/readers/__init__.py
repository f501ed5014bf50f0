"""The readers: ``readers.file`` (``file.py``), ``readers.numpy``, ``readers.webdataset``,
``readers.caffe``, ``readers.caffe2``, ``readers.tfrecord`` and ``readers.coco``.

Each lists its data once, when the pipeline is built, every path checked against the data
roots first (``data_paths.py``); orders its samples with the file reader's stage (DALI's
readers share one loader, so sharding, shuffling and padding are the same); digests its
listing into every checkpoint (``identity.py``); and reads one sample's outputs by index at
run time (a ``SampleSource``, ``build.py``), so a restore starts at any position without
replay.

``build.py`` holds a reader's parts and the map of readers; each reader's module registers
its builder there (``@register_reader``) and its behaviour probe: ``file.py``,
``numpy_reader.py`` (with ``npy_format.py``), ``webdataset.py`` (with ``tar_index.py``),
``caffe.py`` (with ``lmdb_records.py``), ``tfrecord.py`` and ``coco.py`` (with
``coco_index.py``, its document, and ``coco_masks.py``). ``formats/`` holds the record
messages they parse, generated from ``proto/``.

Imports: ``admission``, ``data`` (roots, files, identity), ``stages`` (the file reader's
order) and ``ops`` (the probe contract).
"""
