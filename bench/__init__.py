"""offload's benchmark program (issue #4): ``python -m bench`` runs every case in one process
and prints ratios of measurements taken in the same round, so a noisy shared machine moves
the numerator and the denominator together.

One module per case (``case_cost``, ``case_scale``, ``case_growth``, ``case_fanout``); what
case 1 compares against in ``baselines`` (the hand-written floor, huey); statistics in
``stats``; the table and the JSON in ``report`` (and the markdown table of docs/benchmarks.md in
``readme_table``); engine plumbing (temp homes, WAL, queue draining) in ``harness``;
pre-filled ledgers in ``ledger_fill``; case 4's model server process in
``model_server_proc``; a pyinstrument view of one delegation's path in ``profile_cost``.
"""
