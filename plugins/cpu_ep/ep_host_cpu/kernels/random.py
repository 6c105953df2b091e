"""Kernels of this family (being written)."""
