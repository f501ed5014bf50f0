"""DALI's ``nvidia.dali.plugin.pytorch.experimental``: ``proxy`` imports, so a script that
imports it (``from ... experimental import proxy as dali_proxy``) gets past its imports;
what it holds raises ``NotSupported`` when used, naming what Conveyor offers instead."""
