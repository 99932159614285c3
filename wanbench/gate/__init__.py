"""The release gate: budgets, the baseline store, statistics and verdicts.

``budgets`` reads the budget file, ``baseline`` stores accepted runs per
environment fingerprint, ``stats`` holds the small-sample tests, ``verdict``
turns one cell's rounds into pass / regression / improvement / inconclusive /
no-baseline / incomparable (``Judge`` does it for the cells of one run) and
``cli`` is ``python -m wanbench compare``.
"""
