"""The image decoders: ``decoders.image`` on the CPU (``decode.py``, with libjpeg-turbo's
fast path in ``jpeg_fast.py``), the window decoders (``decode_window.py``, decoding only the
window where the format allows: ``jpeg_region.py``, ``jpeg_markers.py``), the
``device="mixed"`` decoders through nvImageCodec (``decode_mixed.py``,
``nvimgcodec_batch.py``), the header parsers that read the size an image declares
before a byte of it is decoded (``image_header.py``, ``image_pages.py``,
``header_bytes.py``), and a whole batch's headers read at once (``batch_headers.py``, with
the server's compiled walk ``image_headers.c``)."""
