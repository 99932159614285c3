"""The TiDB profile: a real tiup-deployed TiDB cluster as a ``Cluster``
(``wanbench.profiles.base``), learnt from files a DBA already has.

* ``topology``: the cluster model (``Topology(profile="tidb")``) read from
  ``tiup cluster display`` output (text or JSON), a tiup topology YAML or a
  wanbench cluster YAML; nothing connects anywhere;
* ``inputs``: reading those files as people hand them over (pasted terminal
  output, a strict YAML reader that reports ``file:line``);
* ``cluster``: ``TidbCluster``, the cluster as a ``Cluster``: faults by tc over
  SSH, preflight, live PD leader, dry runs;
* ``plan``: fault planning (which host gets which rules, towards whom) and the
  dry-run rendering;
* ``pd``: a small PD HTTP client (leader, members, pending-peer regions);
* ``facts``: TiDB versions at run time, for the environment fingerprint;
* ``cli``: ``python -m wanbench topology FILE``.

Import-free on purpose: importing one module never loads the others.
"""
