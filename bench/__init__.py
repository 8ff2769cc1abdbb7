"""offload's benchmark program (issue #4): ``python -m bench`` runs every case in one process
and prints ratios of measurements taken in the same run, so a noisy shared machine moves the
numerator and the denominator together.

One module per case (``case_cost``, ``case_scale``, ``case_growth``, ``case_fanout``), the
statistics in ``stats``, the table and the JSON in ``report``, the shared engine plumbing
(temp homes, WAL, queue draining) in ``harness``.
"""
