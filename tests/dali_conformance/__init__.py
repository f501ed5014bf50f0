"""Conformance with DALI: DALI's own test files, ported with only their imports
(``nvidia.dali`` -> ``conveyor.dali``) and their data changed, run against Conveyor in
process."""
