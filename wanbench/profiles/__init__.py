"""Cluster profiles: the kinds of cluster wanbench measures, all of one shape.

* ``base``: ``Cluster``, the protocol every profile implements fully;
* ``lab``: the embedded lab, which builds its own ``Topology``
  (``wanbench.profiles.lab.servers``);
* ``tidb``: a tiup-deployed TiDB cluster, whose ``Topology`` is read from
  files a DBA already has (``tiup`` topology YAML, ``tiup cluster display``
  output) plus a small wanbench YAML for what tiup does not know.

Import-free on purpose: importing ``base`` never loads a profile.
"""
