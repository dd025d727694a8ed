"""Offline datasets: the container, file formats, the name registry and the doctor."""

from offrl.data.dataset import Dataset, validate_arrays

__all__ = ["Dataset", "validate_arrays"]
