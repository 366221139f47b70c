"""Read models: SQL behind pages, reports and checks that changes nothing (admin task table and detail,
devices page, supervision panels, health and operations views).

The aggregate modules one level up (``store/tasks.py``, ``store/attempts.py``, …) own the writes and the
lookups the write paths need; these modules only read, return plain dicts or tuples of stored columns and
never token hashes, nonces or claim tokens.
"""
