"""The PostgreSQL transport of the ledger, for several processes on several hosts:
``ledger.PostgresLedger`` and its parts (connections, lease, functions, queue, ...).
Importing a part imports neither psycopg's pool nor the ledger class.
"""
