# Thin on purpose. wanbench's options, markers, hooks and fixtures are a pytest
# plugin inside the package (wanbench/pytest_plugin/__init__.py, loaded through the
# `pytest11` entry point once the project is installed: scripts/setup does
# `pip install -e .`), so they work from any directory, not only from here.

# The `pytester` fixture for selftests/test_plugin.py (pytest accepts
# pytest_plugins only in the root conftest).
pytest_plugins = ["pytester"]
