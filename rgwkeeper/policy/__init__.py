"""Policies: pure functions from a snapshot (plus settings and remembered state) to actions.

No I/O and no clock of their own: ``now`` is passed in, so tests drive time by hand.
"""
