"""What an owner process runs beside its engine: the owner loop (control requests other
processes left, activity snapshots), the journal of its units, ``offload worker`` (the
home's background worker on SQLite too), and the hand-over of its work when it leaves.
"""
