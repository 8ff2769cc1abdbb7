"""Measurements to rerun by hand, each its own ``python -m bench.probes.NAME``.
"""
