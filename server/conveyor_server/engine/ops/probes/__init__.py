"""The behaviour probes' contract: what a probe is and the registry every operator, reader
and stage adds its probe to (``probe_set.py``), and the canonical inputs they run on
(``inputs.py``: synthetic arrays with the same bits everywhere, and the committed probe
images). ``identity/behaviour`` runs them."""
