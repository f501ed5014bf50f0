"""The app room: the server as a program.

Holds the command line (``main.py``), the configuration from file, environment and flags
(declared in ``config.py``, read by ``config_loading.py``), TLS and authentication from the
configuration (``security.py``), the pipelines named in the configuration (``startup.py``),
the decoders' own pixel caps, set before OpenCV loads (``decoder_caps.py``), logs
(``logs.py``), Prometheus metrics (``metrics.py``, the service's observer; the load signals
an autoscaler and the dashboard read, per pipeline and per server, in ``load_metrics.py``)
and the container health probe (``probe.py``).

Imports: every other room; it assembles them. Nothing imports the app room but the demo.
"""
