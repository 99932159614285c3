"""Package list only (metadata is in pyproject.toml).

The performance suite stays in ``tests/`` in the checkout (node ids such as
``tests/rtt/test_rtt.py::test_rtt[...]``), and ships inside the wheel as the
``wanbench.suite`` package, so ``pytest --pyargs wanbench.suite`` (or
``wanbench run``) runs it from any directory. The fixtures those tests use sit
beside them in ``fixtures/`` and ship as ``wanbench.fixtures`` (the pytest
plugin, ``wanbench.pytest_plugin``, loads them). pyproject.toml alone cannot
map a directory to a subpackage while also finding the other packages.
"""

from setuptools import find_namespace_packages, find_packages, setup

suite = ["wanbench.suite"] + [f"wanbench.suite.{p}" for p in find_namespace_packages("tests")]
setup(
    packages=find_packages(include=["wanbench", "wanbench.*"]) + suite + ["wanbench.fixtures"],
    package_dir={"wanbench.suite": "tests", "wanbench.fixtures": "fixtures"},
)
