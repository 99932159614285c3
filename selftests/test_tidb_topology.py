"""The TiDB profile's cluster model: seed 000's display output, its tiup YAML, the wanbench YAML."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from wanbench.errors import ConfigError
from wanbench.profiles.tidb.model import (
    LABEL_DASHBOARD,
    LABEL_LEADER,
    LABEL_MONITORING,
    LABEL_UNKNOWN,
    cluster_settings,
)
from wanbench.profiles.tidb.topology import load_cluster
from wanbench.profiles.tidb.views import (
    SYSBENCH_IGNORE_ERRORS,
    fault_components,
    parse_load_host,
    parse_pd_urls,
    pd_client_urls,
    pd_leader,
    sql_endpoints,
    static_view,
    warmup_statements,
    with_pd_leader,
    workload_settings,
)
from wanbench.topology import load_catalog

ROOT = Path(__file__).resolve().parents[1]
DATA = Path(__file__).parent / "data"
DISPLAY = DATA / "tiup_display_seed000.txt"
TOPOLOGY = DATA / "tiup_topology_seed000.yaml"


@pytest.fixture(scope="module")
def display():
    return load_cluster(DISPLAY)


@pytest.fixture(scope="module")
def tiup_yaml():
    return load_cluster(TOPOLOGY)


def test_seed000_display_roles_and_counts(display) -> None:
    assert display.profile == "tidb"
    assert display.name == "tidb-demo"
    assert display.version == "v8.5.3"
    assert display.shape() == {"grafana": 1, "pd": 6, "prometheus": 1, "tidb": 6, "tikv": 2, "tiproxy": 6}
    assert len(display.components) == 22  # "Total nodes: 22"
    assert {c.name for c in display.by_role("tikv")} == {"tikv-10.160.152.24:20160", "tikv-172.24.40.20:20160"}
    tikv = display.component("tikv-10.160.152.24:20160")
    assert (tikv.host, tikv.ports, tikv.status) == ("10.160.152.24", (20160, 20180), "Up")


def test_seed000_leader_and_dashboard_flags(display) -> None:
    leader = pd_leader(display)
    assert leader is not None
    assert leader.address == "10.160.152.23:2379"
    assert leader.status == "Up|L"
    assert [c.name for c in display.select("pd:leader")] == ["pd-10.160.152.23:2379"]
    assert len(display.select("pd:!leader")) == 5
    ui = display.select(f"pd:{LABEL_DASHBOARD}")
    assert [c.address for c in ui] == ["10.160.152.21:2379"]
    assert LABEL_LEADER not in ui[0].labels, "UI marks the dashboard, not the leader"


def test_monitoring_kept_but_never_faulted(display) -> None:
    monitoring = [c for c in display.components if LABEL_MONITORING in c.labels]
    assert sorted(c.role for c in monitoring) == ["grafana", "prometheus"]
    eligible = {c.name for c in fault_components(display)}
    assert not eligible & {c.name for c in monitoring}
    assert len(eligible) == 20
    prom = display.component("prometheus-172.24.40.20:9090")
    assert prom.ports == (9090, 9115, 9100, 12020)


def test_tiup_yaml_gives_the_same_model(display, tiup_yaml) -> None:
    assert tiup_yaml.profile == "tidb"
    assert static_view(display) == tiup_yaml.components
    # the YAML cannot know the leader; once PD says who it is, the labels agree too
    relabelled = with_pd_leader(tiup_yaml, "10.160.152.23:2379")
    assert {c.name for c in relabelled.select("pd:leader")} == {c.name for c in display.select("pd:leader")}
    assert cluster_settings(tiup_yaml).ssh_user == "root"
    assert cluster_settings(display).ssh_user == "root"  # display's "Deploy user"


def test_unknown_roles_are_kept_but_unused(tmp_path: Path) -> None:
    text = DISPLAY.read_text().replace(
        "Total nodes: 22",
        "10.160.152.30:9999   frobnicator 10.160.152.30  9999/9998             linux/x86_64  Up      -"
        "                                /data/tidb-deploy/frob-9999\nTotal nodes: 23",
    )
    path = tmp_path / "display.txt"
    path.write_text(text)
    topo = load_cluster(path)
    frob = topo.component("frobnicator-10.160.152.30:9999")
    assert LABEL_UNKNOWN in frob.labels
    assert frob.ports == (9999, 9998)
    assert frob not in fault_components(topo)

    doc = TOPOLOGY.read_text() + "\nfrob_servers:\n  - host: 10.160.152.30\n    port: 9999\n    ssh_port: 2222\n"
    ypath = tmp_path / "topology.yaml"
    ypath.write_text(doc)
    ytopo = load_cluster(ypath)
    yfrob = ytopo.component("frob-10.160.152.30:9999")
    assert LABEL_UNKNOWN in yfrob.labels
    assert cluster_settings(ytopo).ssh_port_of("10.160.152.30") == 2222


def test_truncated_display_is_refused(tmp_path: Path) -> None:
    lines = DISPLAY.read_text().splitlines()
    cut = [ln for ln in lines if "172.24.40.19:6000" not in ln]
    path = tmp_path / "cut.txt"
    path.write_text("\n".join(cut) + "\n")
    with pytest.raises(ConfigError, match="Total nodes: 22.*21 rows"):
        load_cluster(path)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("just some text\n", "not a cluster description"),
        ("key: [unclosed\n", r"cluster.txt:2: not valid YAML.*expected `tiup cluster display` output"),
        ("pd_servers:\n  - port: 2379\n", r"pd_servers\[0\] needs a 'host'"),
        ("tidb_servers:\n  - host: 10.0.0.1\n    port: abc\n",
         r"cluster.txt:3: tidb_servers\[0\].port: 'abc' is not a whole number"),
    ],
)
def test_bad_files_are_config_errors(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "cluster.txt"
    path.write_text(content)
    with pytest.raises(ConfigError, match=message):
        load_cluster(path)


def test_missing_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read cluster file"):
        load_cluster(tmp_path / "nope.yaml")


def _wanbench_yaml(tmp_path: Path, body: str) -> Path:
    (tmp_path / "display.txt").write_text(DISPLAY.read_text())
    path = tmp_path / "cluster.yaml"
    path.write_text(textwrap.dedent(body))
    return path


def test_wanbench_yaml_adds_what_tiup_does_not_know(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = _wanbench_yaml(tmp_path, """\
        wanbench_cluster: 1
        name: dc-pair
        display: display.txt
        sql: {user: bench, password_env: WB_TEST_TIDB_PASSWORD, database: sbtest, endpoints: tidb}
        ssh: {user: tidb, port: 2222, key: ~/.ssh/id_wanbench, known_hosts: /etc/wanbench/known_hosts}
        load_host: 10.160.152.30
        pd_url: http://10.160.152.22:2379
        """)
    topo = load_cluster(path)
    s = cluster_settings(topo)
    assert topo.name == "dc-pair"
    assert s.source_format == "wanbench+tiup-display"
    assert (s.ssh_user, s.ssh_port, s.sql_user, s.load_host) == ("tidb", 2222, "bench", "10.160.152.30")
    assert s.ssh_key == os.path.expanduser("~/.ssh/id_wanbench")
    assert pd_client_urls(topo) == ["http://10.160.152.22:2379"]
    assert pd_client_urls(topo, "http://127.0.0.1:1") == ["http://127.0.0.1:1"]
    assert sql_endpoints(topo) == [(c.host, 4000) for c in topo.by_role("tidb")]
    assert static_view(topo) == static_view(load_cluster(DISPLAY))

    monkeypatch.setenv("WB_TEST_TIDB_PASSWORD", "s3cr3t-Passw0rd")
    assert s.password() == "s3cr3t-Passw0rd"
    assert "s3cr3t" not in json.dumps(topo.to_json()) + json.dumps(s.to_json()) + repr(topo)
    monkeypatch.delenv("WB_TEST_TIDB_PASSWORD")
    with pytest.raises(ConfigError, match="WB_TEST_TIDB_PASSWORD .* is not set"):
        s.password()


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("display: display.txt\nsql: {user: root, password: hunter2}\n", "password_env"),
        ("display: display.txt\nsql: {password_env: 'not a name'}\n", "NAME of an environment variable"),
        ("display: display.txt\nssh: {usr: x}\n", "unknown keys in 'ssh'"),
        ("display: display.txt\ncolour: blue\n", "unknown keys"),
        ("wanbench_cluster: 1\n", "exactly one of 'topology'"),
        ("display: display.txt\ntopology: other.yaml\n", "exactly one of 'topology'"),
        ("display: display.txt\nsql: {endpoints: somewhere}\n", "sql.endpoints"),
    ],
)
def test_wanbench_yaml_mistakes(tmp_path: Path, body: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message) as info:
        load_cluster(_wanbench_yaml(tmp_path, body))
    assert "hunter2" not in str(info.value)


def test_wanbench_yaml_explicit_endpoints(tmp_path: Path) -> None:
    path = _wanbench_yaml(tmp_path, """\
        topology: topo.yaml
        sql: {endpoints: ["10.0.0.5:6000", "10.0.0.6:6000"]}
        """)
    (tmp_path / "topo.yaml").write_text(TOPOLOGY.read_text())
    topo = load_cluster(path)
    assert sql_endpoints(topo) == [("10.0.0.5", 6000), ("10.0.0.6", 6000)]


def test_tidb_aware_sysbench_settings(display) -> None:
    ws = workload_settings(display, "proxy")
    assert len(ws.endpoints) == 6
    assert {p for _, p in ws.endpoints} == {6000}
    args = ws.sysbench_args()
    ignore = next(a for a in args if a.startswith("--mysql-ignore-errors="))
    assert {8002, 8022, 8028, 9007} <= {int(x) for x in ignore.split("=", 1)[1].split(",")}
    assert set(SYSBENCH_IGNORE_ERRORS) >= {8002, 8022, 8028, 9007}
    assert "--db-ps-mode=auto" in args
    hosts = next(a for a in args if a.startswith("--mysql-host=")).split("=", 1)[1].split(",")
    assert hosts == [h for h, _ in ws.endpoints], "round robin over every TiProxy"
    direct = workload_settings(display, "direct")
    assert {p for _, p in direct.endpoints} == {4000}
    assert len(direct.endpoints) == 6
    assert warmup_statements(2) == [
        "SELECT COUNT(pad) FROM sbtest1 USE INDEX(k_1)",
        "SELECT COUNT(pad) FROM sbtest2 USE INDEX(k_2)",
    ]
    with pytest.raises(ConfigError):
        sql_endpoints(display, "sideways")


def test_option_value_parsers() -> None:
    assert parse_pd_urls("http://10.0.0.1:2379, https://pd.example:2379/") == [
        "http://10.0.0.1:2379", "https://pd.example:2379"]
    with pytest.raises(ConfigError, match="not a PD client URL"):
        parse_pd_urls("10.0.0.1:2379")
    assert parse_load_host(" 10.160.152.30 ") == "10.160.152.30"
    with pytest.raises(ConfigError):
        parse_load_host("a b; rm -rf /")


def test_catalog_scenarios_select_components(display) -> None:
    catalog = load_catalog("tidb")
    network = {"tiproxy", "tidb", "pd_leader", "pd_follower", "tikv_write", "tikv_read", "tikv_tpcc", "tikv_ycsb"}
    availability = {"heartbeat_pd_leader", "heartbeat_tikv", "heartbeat_tidb"}
    assert set(catalog) == network | availability
    for s in catalog.values():
        assert set(s.families) == ({"availability"} if s.name in availability else {"rtt", "bandwidth", "loss"})
        assert display.select(s.target), s.name
    assert catalog["tikv_write"].workload == "write_probe"
    assert catalog["tikv_read"].workload == "read_probe"
    assert catalog["pd_leader"].workload == "read_probe"
    assert [c.address for c in display.select(catalog["pd_leader"].target)] == ["10.160.152.23:2379"]


_IDS_MODULE = """
import pytest
from wanbench.faults.base import parse_levels
from wanbench.profiles.tidb.topology import load_cluster
from wanbench.topology import load_catalog, select_scenarios

TOPO = load_cluster({path!r})
CATALOG = load_catalog(TOPO.profile)
CONC = (10, 50, 100, 250, 500, 1000)

def cases(family, kind, levels):
    return [pytest.param(s, lv, c, id=f"{{s.name}}-{{lv.label}}-c{{c}}")
            for s in select_scenarios(CATALOG, None, family)
            for lv in parse_levels(kind, levels) for c in CONC]

@pytest.mark.rtt
@pytest.mark.parametrize(("scenario", "level", "concurrency"), cases("rtt", "delay", "0,50ms,100ms,200ms"))
def test_rtt(scenario, level, concurrency):
    pass

@pytest.mark.bandwidth
@pytest.mark.parametrize(("scenario", "level", "concurrency"), cases("bandwidth", "rate", "0,30mbit,10mbit,5mbit"))
def test_bandwidth(scenario, level, concurrency):
    pass
"""


@pytest.mark.parametrize("cluster", [DISPLAY, TOPOLOGY], ids=["display", "tiup-yaml"])
def test_k_rtt_and_tikv_write_selects_24(tmp_path: Path, cluster: Path) -> None:
    """The id scheme of tests/rtt over this catalog: `-k "rtt and tikv_write"` picks 4 levels x 6 concurrencies."""
    (tmp_path / "test_ids.py").write_text(_IDS_MODULE.format(path=str(cluster)))
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers =\n    rtt: x\n    bandwidth: x\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", "-k", "rtt and tikv_write"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120, check=False,
    )
    ids = [ln for ln in proc.stdout.splitlines() if "::" in ln]
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert len(ids) == 24, proc.stdout
    assert all(i.startswith("test_ids.py::test_rtt[tikv_write-") for i in ids)
    assert "test_ids.py::test_rtt[tikv_write-200ms-c1000]" in ids
    assert "test_ids.py::test_rtt[tikv_write-0ms-c10]" in ids


def test_cli_prints_topology_json() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "wanbench", "topology", str(DISPLAY)],
        cwd=ROOT, capture_output=True, text=True, timeout=60, check=False,
    )
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["profile"] == "tidb"
    assert doc["version"] == "v8.5.3"
    assert len(doc["components"]) == 22
    assert doc["shape"]["tiproxy"] == 6
    assert doc["settings"]["ssh_user"] == "root"


def test_cli_rejects_unknown_file(tmp_path: Path) -> None:
    bad = tmp_path / "notes.txt"
    bad.write_text("hello\n")
    proc = subprocess.run(
        [sys.executable, "-m", "wanbench", "topology", str(bad)],
        cwd=ROOT, capture_output=True, text=True, timeout=60, check=False,
    )
    assert proc.returncode == 2
    assert "not a cluster description" in proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize("cluster", [DISPLAY, TOPOLOGY], ids=["display", "tiup-yaml"])
def test_suite_collects_24_tikv_write_rtt_cells(cluster: Path) -> None:
    """The real suite: `pytest --collect-only -k "rtt and tikv_write" --cluster FILE` connects nowhere."""
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", "-k", "rtt and tikv_write",
         "--cluster", str(cluster), "tests/rtt"],
        cwd=ROOT, capture_output=True, text=True, timeout=120, check=False,
    )
    ids = [ln for ln in proc.stdout.splitlines() if "::" in ln]
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert len(ids) == 24, proc.stdout
    assert "tests/rtt/test_rtt.py::test_rtt[tikv_write-200ms-c1000]" in ids
    assert all("[tikv_write-" in i for i in ids)
