"""Test data: the project's sample data generator."""

from conveyor_server.demo.sample_data import make_image, make_image_folder

__all__ = ["make_image", "make_image_folder"]
