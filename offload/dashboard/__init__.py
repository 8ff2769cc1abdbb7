"""``offload dashboard``: a web page over the delegation ledger and this process's live roster.

Layout: ``model`` turns ledger rows and live records into plain view dicts (no HTTP, no
HTML); ``overview`` (counters, owners), ``timeline`` (one delegation on one time axis),
``transcript`` (what each child said, from the journal), ``history`` (keyset pages and
charts) and ``sessions`` (a session's delegations and where their results went) do the same
for their pages; ``app`` is the Starlette application (pages, server-sent events, actions,
/metrics), ``security`` guards binds and requests, ``server`` runs it under uvicorn.
Templates escape everything they print: child output is untrusted.
"""
