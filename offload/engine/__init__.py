"""The background-delegation engine as a package, below tools/ and above nothing of ours.

``offload.ledger`` is the durable record of every delegation behind one interface
(``DelegationLedger``) with one factory (``open_ledger``). The hermes-compatible modules in
``tools/`` stay as thin facades over this package; nothing here imports ``tools``, ``agent``,
``gateway`` or ``offload``.
"""
