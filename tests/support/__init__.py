"""Helpers shared by the tests (no tests here): real servers and Redis modes, generated
data sets and images, certificates, the shared save/restore property, GPU cases."""
