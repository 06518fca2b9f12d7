"""Reproducible benchmarks: real clients against txbroker (and Tansu for comparison)."""
