"""The lab profile: the embedded lab, real servers from Debian's packages on
loopback, as a ``Cluster`` (``wanbench.profiles.base``).

* ``servers``: ``Lab``, the lab's servers (MariaDB primary and semi-sync
  replica, HAProxy, Toxiproxy, Prometheus) in one run directory;
* ``cluster``: ``LabCluster``, the lab as a ``Cluster``: where clients
  connect, which mechanism puts each fault kind in place, how it is verified;
* ``faults``: the lab's tc and nftables fault scope on ``lo`` (rate caps and
  packet loss, selected by each link's Toxiproxy port);
* ``cli``: ``python -m wanbench lab up | status | down``.

Import-free on purpose: importing one module never loads the others.
"""
