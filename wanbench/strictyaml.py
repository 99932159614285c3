"""One strict YAML loader for every file a user writes (budgets, catalogues,
cluster descriptions): a duplicate key is an error naming both lines (YAML
itself silently keeps the last one), and every mapping and sequence knows
the line (1-based) of itself and of each key or item, so a mistake found
later is reported as ``FILE:LINE: reason``."""

from __future__ import annotations

from typing import Any

import yaml

from wanbench.errors import ConfigError


class LineDict(dict):
    """A YAML mapping that knows the line (1-based) of itself and of each key."""

    line: int = 0
    lines: dict[Any, int]


class LineList(list):
    """A YAML sequence that knows the line of itself and of each item."""

    line: int = 0
    lines: list[int]


class _DuplicateKey(yaml.MarkedYAMLError):
    pass


class StrictLoader(yaml.SafeLoader):
    """SafeLoader that records line numbers and rejects duplicate keys."""


def _construct_map(loader: StrictLoader, node: yaml.MappingNode) -> LineDict:
    seen: dict[Any, int] = {}
    for key_node, _ in node.value:
        if key_node.tag == "tag:yaml.org,2002:merge":
            continue  # '<<: *anchor' values may be overridden on purpose
        key = loader.construct_object(key_node, deep=True)
        try:
            first = seen.get(key)
        except TypeError:
            raise yaml.constructor.ConstructorError(None, None, "unhashable key", key_node.start_mark) from None
        if first is not None:
            raise _DuplicateKey(
                None, None,
                f"duplicate key {key!r} (first at line {first}): YAML would silently keep only the last one; "
                "merge the two into one", key_node.start_mark,
            )
        seen[key] = key_node.start_mark.line + 1
    loader.flatten_mapping(node)
    out = LineDict()
    out.line = node.start_mark.line + 1
    out.lines = {}
    for key_node, value_node in node.value:
        key = loader.construct_object(key_node, deep=True)
        out[key] = loader.construct_object(value_node, deep=True)
        out.lines[key] = key_node.start_mark.line + 1
    return out


def _construct_seq(loader: StrictLoader, node: yaml.SequenceNode) -> LineList:
    out = LineList(loader.construct_object(child, deep=True) for child in node.value)
    out.line = node.start_mark.line + 1
    out.lines = [child.start_mark.line + 1 for child in node.value]
    return out


StrictLoader.add_constructor("tag:yaml.org,2002:map", _construct_map)
StrictLoader.add_constructor("tag:yaml.org,2002:seq", _construct_seq)


def load_yaml(text: str, *, source: str) -> Any:
    """Parse ``text``; a syntax error or a duplicate key is a ``ConfigError`` naming ``source:line``."""
    try:
        return yaml.load(text, Loader=StrictLoader)  # noqa: S506 - StrictLoader is a SafeLoader
    except _DuplicateKey as exc:
        line = exc.problem_mark.line + 1 if exc.problem_mark else 0
        raise ConfigError(f"{source}:{line}: {exc.problem}") from None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"{source}:{mark.line + 1}" if mark else source
        raise ConfigError(f"{where}: not valid YAML: {exc.problem or exc.context}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{source}: not valid YAML: {exc}") from None
