"""The demo (``make demo``, ``conveyor-demo``) and what it needs beside the server.

Holds the demo program (``run.py``), its pipeline (``pipelines.py``: a module of its own,
which imports only the definition contract), starting ``conveyor-server`` processes and
stopping them (``launch.py``), and a small generated JPEG data set (``sample_data.py``). The
tests and benchmarks reuse the last three. No running server needs this package.

Imports: any room (it starts the server as a separate process).
"""
