"""Device: the accelerators and getting outputs out of them.

Which CUDA devices this process can use (``devices.py``), the non-blocking compute stream
per device that GPU work runs on and the events that order copies after it
(``streams.py``), the ring of pinned host buffers a pipeline's GPU outputs are copied
into (``output_ring.py``), and the outputs kept on the device for a caller in the process,
with the loans of their memory (``device_outputs.py``).

Imports: no other room of the engine.
"""
