"""The rule that splits the self-tests over two workers (selftests/conftest.py), and what keeps a test
outside the ``machine`` scope from touching the machine as a whole."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from selftests.conftest import MACHINE_MODULES, scope_of

HERE = Path(__file__).resolve().parent


class _Item:
    """What ``scope_of`` reads of a collected test: its file and its markers."""

    def __init__(self, name: str, *markers: str) -> None:
        self.path = HERE / name
        self._markers = set(markers)

    def get_closest_marker(self, name: str) -> object | None:
        return name if name in self._markers else None


@pytest.mark.parametrize(("name", "markers", "scope"), [
    ("test_anything.py", ("lab",), "machine"),
    ("test_anything.py", ("lab", "netns"), "machine"),  # a lab wins: it uses lo
    ("test_anything.py", ("netns",), "netns"),
    ("test_anything.py", (), None),
    ("test_lab_sockets.py", (), "machine"),  # listed: its Lab.down() sweeps lo
])
def test_scope_of_a_test(name: str, markers: tuple[str, ...], scope: str | None) -> None:
    assert scope_of(_Item(name, *markers)) == scope  # type: ignore[arg-type]


def test_every_listed_module_exists() -> None:
    assert {m for m in MACHINE_MODULES if not (HERE / m).is_file()} == set()


def _inner_conftests(tree: ast.Module) -> list[str]:
    """The string constants of a module that define a ``run_context`` fixture: the conftest of a pytest
    session the module starts (a plain string or the literal parts of an f-string)."""
    found = []
    parts = {id(v) for n in ast.walk(tree) if isinstance(n, ast.JoinedStr) for v in n.values}
    for node in ast.walk(tree):
        if id(node) in parts:  # read with its f-string
            continue
        if isinstance(node, ast.JoinedStr):
            text = "".join(v.value for v in node.values if isinstance(v, ast.Constant) and isinstance(v.value, str))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            text = node.value
        else:
            continue
        if "@pytest.fixture" in text and "def run_context(" in text:
            found.append(text)
    return found


def test_a_session_of_made_up_cells_opens_no_cluster() -> None:
    """A pytest session a self-test starts with a stand-in ``run_context`` (its cells are made up) must
    not open the cluster: that starts the default lab, whose start sweeps every dead run's tc/nft
    faults on this machine's lo while the machine scope runs beside it (test_lab_lease.py's killed
    runner lost its qdisc and table so). Its conftest adds ``NO_CLUSTER`` or stands in ``cluster``."""
    checked, missing = [], []
    for path in sorted(HERE.glob("test_*.py")):
        if path.name == Path(__file__).name:
            continue
        tree = ast.parse(path.read_text())
        conftests = _inner_conftests(tree)
        if not conftests:
            continue
        checked.append(path.name)
        uses_guard = any(isinstance(n, ast.Name) and n.id == "NO_CLUSTER" for n in ast.walk(tree))
        if not uses_guard and not all("def cluster(" in text for text in conftests):
            missing.append(path.name)
    assert len(checked) >= 5, checked  # the modules known today: the check reads what it should
    assert missing == [], f"sessions with a stand-in run_context that may start a lab: {missing}"
