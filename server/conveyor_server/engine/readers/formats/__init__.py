"""Record formats the readers parse: Caffe's ``Datum`` (``caffe_pb2``), Caffe2's
``TensorProtos`` (``caffe2_pb2``) and TensorFlow's ``Example`` (``example_pb2``), generated
from ``proto/caffe``, ``proto/caffe2`` and ``proto/tensorflow`` by ``scripts/gen_proto.py``
(``make proto``); never edited by hand."""
