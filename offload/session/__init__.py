"""The consumer side of one session: its conversation (agent plus stored history), the
driver a frontend runs it with, its inbox of results and the units other processes run.
"""
