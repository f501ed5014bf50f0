"""The server as a program: configuration, the decoders' pixel caps, first run and metrics."""
