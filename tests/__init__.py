"""wanbench's performance suite; installed as ``wanbench.suite`` (see setup.py)."""
