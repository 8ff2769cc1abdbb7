"""Where the time goes: pyinstrument / CPU profiles, ``python -m bench.profilers.NAME``.
"""
