"""The fixtures (and the scenarios in tests/) never ask which profile they have:
no module compares a profile name, checks a cluster's class, reaches past the
shape of every cluster (``Cluster``) into one profile's attributes, or imports
a profile package. They ask for capabilities instead
(``cluster.offers.get(REPLICAS)``, ``wanbench/profiles/capabilities.py``), and
the registry (``wanbench/profiles/registry.py``) is the one place a profile's
name picks its class. Read from the source, as ``test_imports.py`` reads the
layering, so a third profile plugs in without touching the fixtures."""

from __future__ import annotations

import ast
import inspect
import json
import textwrap
from pathlib import Path

import pytest

from selftests.gate_context import CTX
from wanbench.profiles.base import Cluster
from wanbench.profiles.registry import PROFILES

ROOT = Path(__file__).resolve().parent.parent
CHECKED = (ROOT / "fixtures", ROOT / "tests")
#: the profile packages (wanbench/profiles/<profile>/): what only the registry imports
PROFILE_PACKAGES = tuple(sorted(f"wanbench.profiles.{d.name}" for d in (ROOT / "wanbench" / "profiles").iterdir()
                                if (d / "__init__.py").exists()))
PROFILE_NAMES = frozenset(PROFILES) | {p.rsplit(".", 1)[1] for p in PROFILE_PACKAGES}
#: what a fixture may use of any cluster: the shape
SHAPE = frozenset(Cluster.__annotations__) | {n for n, v in vars(Cluster).items()
                                              if inspect.isfunction(v) and not n.startswith("_")}


def _is_cluster(node: ast.expr) -> bool:
    """``cluster`` or ``<anything>.cluster``: how the fixtures name the cluster under test."""
    return (isinstance(node, ast.Name) and node.id == "cluster") or (
        isinstance(node, ast.Attribute) and node.attr == "cluster")


def _mentions_cluster(node: ast.expr) -> bool:
    return "cluster" in ast.unparse(node).lower()


def _names_a_profile(node: ast.AST) -> bool:
    """A profile's name written out, or a cluster's ``profile`` read: what a comparison,
    a key or an index by profile looks like."""
    for sub in ast.walk(node):
        if isinstance(sub, ast.Constant) and sub.value in PROFILE_NAMES:
            return True
        if isinstance(sub, ast.Attribute) and sub.attr == "profile":
            return True
    return False


def _imported(node: ast.Import | ast.ImportFrom) -> list[str]:
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    base = node.module or ""
    return [base, *(f"{base}.{a.name}" for a in node.names)]


def profile_questions(source: str, where: str = "<source>") -> list[str]:
    """Every place ``source`` asks which profile it has, as ``where:line: what``."""
    found: list[tuple[int, str]] = []

    def say(node: ast.AST, what: str) -> None:
        line = getattr(node, "lineno", 0)
        found.append((line, f"{where}:{line}: {what}: {ast.unparse(node)[:100]}"))

    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            bad = [m for m in _imported(node) if m.startswith(PROFILE_PACKAGES)
                   and (m in PROFILE_PACKAGES or m.startswith(tuple(f"{p}." for p in PROFILE_PACKAGES)))]
            if bad:
                say(node, f"imports a profile package ({bad[0]})")
        elif isinstance(node, ast.Compare):
            if any(_names_a_profile(x) for x in (node.left, *node.comparators)):
                say(node, "compares a profile name")
        elif isinstance(node, ast.Dict):
            if any(k is not None and _names_a_profile(k) for k in node.keys):
                say(node, "keys by profile name")
        elif isinstance(node, ast.Subscript):
            if _names_a_profile(node.slice):
                say(node, "looks up by profile name")
        elif isinstance(node, ast.match_case):
            if _names_a_profile(node.pattern):
                say(node.pattern, "matches a profile name")
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            fn, args = node.func.id, node.args
            if fn in ("isinstance", "issubclass") and len(args) == 2 and (
                    _mentions_cluster(args[0]) or "Cluster" in ast.unparse(args[1])):
                say(node, "checks a cluster's class")
            elif fn == "type" and args and _mentions_cluster(args[0]):
                say(node, "checks a cluster's class")
            elif (fn in ("getattr", "hasattr", "setattr") and len(args) >= 2 and _is_cluster(args[0])
                  and not (isinstance(args[1], ast.Constant) and args[1].value in SHAPE)):
                say(node, "reaches past the shape of a cluster")
        elif isinstance(node, ast.Attribute) and _is_cluster(node.value):
            if node.attr == "__class__":
                say(node, "checks a cluster's class")
            elif node.attr not in SHAPE:
                say(node, f"reaches past the shape of a cluster (.{node.attr})")
    return [text for _, text in sorted(found)]


def _modules() -> list[Path]:
    return sorted(p for d in CHECKED for p in d.rglob("*.py"))


def test_the_rule_reads_the_fixtures_and_the_profiles_it_knows() -> None:
    names = {p.relative_to(ROOT).as_posix() for p in _modules()}
    assert {"fixtures/cluster.py", "fixtures/evidence.py", "fixtures/availability.py",
            "tests/availability/test_availability.py"} <= names
    assert PROFILE_PACKAGES == ("wanbench.profiles.lab", "wanbench.profiles.tidb")
    assert {"lab", "tidb", "profile", "topology", "offers", "sql_targets", "copies"} <= PROFILE_NAMES | SHAPE


@pytest.mark.parametrize("module", _modules(), ids=lambda p: p.relative_to(ROOT).as_posix())
def test_no_fixture_asks_which_profile_it_has(module: Path) -> None:
    found = profile_questions(module.read_text(), module.relative_to(ROOT).as_posix())
    assert not found, ("ask for a capability (cluster.offers.get(...), wanbench/profiles/capabilities.py) "
                       "instead:\n" + "\n".join(found))


#: what the fixtures did before profiles offered capabilities: each is found
ASKED = {
    'if cluster.profile == "lab":\n    pass': "compares a profile name",
    'if profile_of(request.config).name != "lab":\n    pass': "compares a profile name",
    'if self.cluster.profile != "lab":\n    pass': "compares a profile name",
    'x = {"lab": 1, "tidb": 2}[name]': "keys by profile name",
    "x = openers[cluster.profile]": "looks up by profile name",
    "match cluster.profile:\n    case 'tidb':\n        pass": "matches a profile name",
    "ok = isinstance(c, LabCluster)": "checks a cluster's class",
    "ok = isinstance(cluster, object)": "checks a cluster's class",
    "ok = type(self.cluster) is object": "checks a cluster's class",
    "k = cluster.__class__": "checks a cluster's class",
    "from wanbench.profiles.lab import running": "imports a profile package",
    "from wanbench.profiles.lab.cluster import LabCluster": "imports a profile package",
    "from wanbench.profiles import tidb": "imports a profile package",
    "import wanbench.profiles.tidb.outages": "imports a profile package",
    "src = LabRowSource('replica', cluster.lab, 'replica')": "reaches past the shape of a cluster (.lab)",
    "topo = None if self.cluster.dry_run else self.cluster.live_topology()": "reaches past the shape",
    "lab = getattr(cluster, 'lab', None)": "reaches past the shape of a cluster",
}

#: what a fixture may do: use the shape, ask for capabilities, name the profile in a message
ALLOWED = """
from selftests.gate_context import CTX
from wanbench.profiles.base import Cluster, DryRun
from wanbench.profiles.capabilities import OUTAGES, REPLICAS
from wanbench.profiles.registry import open_cluster
replicas = cluster.offers.get(REPLICAS)
targets = cluster.sql_targets("direct")
names = {c.name for c in self.cluster.topology.select(scenario.target)}
note(config, f"this cluster (profile {cluster.profile}) has none")
cell.cluster = member.to_json()
if cell.cluster is None:
    pass
"""


@pytest.mark.parametrize("source", sorted(ASKED), ids=range(len(ASKED)))
def test_the_rule_finds_a_fixture_asking(source: str) -> None:
    found = profile_questions(textwrap.dedent(source))
    assert found, f"not found: {source!r}"
    assert ASKED[source] in found[0], found


def test_the_rule_lets_the_shape_and_capabilities_through() -> None:
    assert profile_questions(ALLOWED) == []


# -- a cluster that offers nothing beyond the shape ----------------------------------------------------------

#: a session whose cluster is a stand-in of another profile, offering no capability
BARE = f"""
import json

import pytest

from wanbench.profiles.capabilities import Offers


class Bare:
    profile = "bare"
    offers = Offers()

    def run_context(self):  # the facts of a run as the gate fingerprints them
        return json.loads({json.dumps({**CTX, "profile": "bare"})!r})

    def close(self):
        pass


@pytest.fixture(scope="session")
def cluster():
    yield Bare()
"""


def test_cells_that_need_what_the_cluster_lacks_are_skipped_saying_so(pytester: pytest.Pytester) -> None:
    """The availability family needs outages, replica scenarios need replicas: one line each, naming
    the capability and the profile, before anything is started or measured."""
    pytester.makeconftest(BARE)
    for family in ("availability", "rtt"):
        pytester.makepyfile(**{f"test_{family}": (ROOT / "tests" / family / f"test_{family}.py").read_text()})
    res = pytester.runpytest_subprocess("-p", "no:randomly", "-rs", "--outages", "partition", "--rtt", "0",
                                        "--concurrency", "1", "-k", "heartbeat_proxy or replica_write",
                                        timeout=120)
    out = res.stdout.str()
    assert res.ret == 0, out + res.stderr.str()
    res.assert_outcomes(skipped=2)
    assert ("heartbeat_proxy needs outages (a partition, pause or restart of one component); "
            "this cluster (profile bare) has none") in out
    assert "replica_write needs a replica that acknowledges commits; this cluster (profile bare) has none" in out
