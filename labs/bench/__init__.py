"""``make bench``: the reference worker side by side with the raw redis-py ceiling, in one run.

Every figure is measured in the same run, on the same Redis and with the same CPU placement,
and reported as a ratio to the best a hand-written loop does (see :mod:`labs.bench.runner`).
"""
