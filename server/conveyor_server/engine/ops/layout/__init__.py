"""DALI's layout operators: ``transpose``, ``reshape``, ``cat`` and ``stack`` (``layout.py``
registers them and their probes), and ``copy`` (``copy.py``: on the GPU, the transfer
``DataNode.gpu()`` records). They move values and never change them."""
