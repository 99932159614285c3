"""A lab whose run directory is deep (a CI checkout, pytest's tmp_path) still gets UNIX sockets:
Linux caps their path at 107 bytes, and MariaDB and tidb-server refuse to start past it."""

from __future__ import annotations

from pathlib import Path

from wanbench.profiles.base import Credentials
from wanbench.profiles.lab.layout import MAX_SOCKET_PATH, socket_path
from wanbench.profiles.lab.mariadb import LabMariadb, socket_of
from wanbench.profiles.lab.servers import Lab


def test_a_short_path_is_kept_and_a_long_one_gets_a_stable_stand_in(tmp_path: Path) -> None:
    short = tmp_path / "s.sock"
    assert socket_path(short) == short
    deep = tmp_path.joinpath(*["a-long-directory-name"] * 6) / "mysqld.sock"
    assert len(str(deep)) > MAX_SOCKET_PATH
    stand_in = socket_path(deep)
    assert len(str(stand_in)) <= MAX_SOCKET_PATH
    assert stand_in.name.startswith("wanbench-")
    assert stand_in.suffix == ".sock"
    assert socket_path(deep) == stand_in  # every caller finds the same socket
    assert socket_path(deep.with_name("other.sock")) != stand_in


def test_the_two_servers_of_a_deep_lab_get_sockets_of_their_own(tmp_path: Path) -> None:
    deep = tmp_path.joinpath(*["a-long-directory-name"] * 6)
    servers = LabMariadb(deep, Credentials("wanbench", "pw"))
    primary, replica = (servers.paths(s)["socket"] for s in ("primary", "replica"))
    assert primary != replica
    assert all(len(str(p)) <= MAX_SOCKET_PATH for p in (primary, replica))
    assert servers.paths("primary")["data"].is_relative_to(deep)  # only the socket moves


def test_down_removes_a_stand_in_left_by_a_killed_server_even_before_set_up(tmp_path: Path) -> None:
    """``lab down`` knows the sockets without the lab's credentials (a lab killed mid-start has none)."""
    deep = tmp_path.joinpath(*["a-long-directory-name"] * 6)
    deep.mkdir(parents=True)
    stale = socket_of(deep, "primary")
    stale.touch()  # what kill -9 of mariadbd leaves
    try:
        Lab(deep, 24990).down()
        assert not stale.exists()
    finally:
        stale.unlink(missing_ok=True)
