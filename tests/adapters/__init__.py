"""The trainer adapters against real servers: ``conveyor.torch`` (its dataset, data-parallel
ranks, torchdata's StatefulDataLoader, the trainer-side normalisation, the DDP example) and
``conveyor.tf``."""
