"""What a run's figures become: spread and ratios, the rich tables and JSON, the docs table.
"""
