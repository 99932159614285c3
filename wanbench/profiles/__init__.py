"""Cluster profiles: how wanbench learns a real cluster's shape (tidb).

The embedded lab builds its own ``Topology`` (``wanbench.profiles.lab.servers``); the TiDB
profile reads one from files a DBA already has (``tiup`` topology YAML,
``tiup cluster display`` output) plus a small wanbench YAML for what tiup
does not know.
"""
