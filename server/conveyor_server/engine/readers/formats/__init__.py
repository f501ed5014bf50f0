"""Record formats the LMDB readers parse: Caffe's ``Datum`` (``caffe_pb2``) and Caffe2's
``TensorProtos`` (``caffe2_pb2``), generated from ``proto/caffe`` and ``proto/caffe2`` by
``scripts/gen_proto.py`` (``make proto``); never edited by hand."""
