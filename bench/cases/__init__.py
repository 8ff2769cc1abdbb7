"""The benchmark cases ``python -m bench`` runs (``case N`` in docs/benchmarks.md), and what
they share: the harness, case 1's baselines, case 3's pre-filled ledgers.
"""
