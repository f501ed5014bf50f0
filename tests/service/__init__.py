"""The gRPC service against real servers on loopback: end to end, errors and status codes,
authentication and TLS, hostile and malformed requests, streams and their ownership."""
