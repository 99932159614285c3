"""Reading cluster files the way people actually hand them over.

Two jobs, both about trust in the input rather than the cluster model:

* ``clean_pasted`` undoes what terminals, chat tools and mail clients do to
  ``tiup`` output: ANSI colours, CRLF, a BOM, non-breaking spaces, tabs,
  ``> `` quoting, Markdown fences and tiup's own update-check chatter. The
  parsers then see the text tiup printed, so a decorated paste gives exactly
  the model the clean file gives.
* ``load_yaml`` (``wanbench.strictyaml``) is a strict YAML reader: it remembers the line of every key
  and list item (so a bad value is reported as ``file:line``) and refuses
  duplicate keys, which plain PyYAML silently merges (two ``tikv_servers:``
  would drop half the TiKV stores without a word).
"""

from __future__ import annotations

import re
import textwrap
from collections.abc import Mapping
from typing import Any

from wanbench.errors import ConfigError
from wanbench.strictyaml import LineDict, LineList

# -- pasted text ---------------------------------------------------------------------------------------------------

#: CSI sequences (colours, cursor moves), OSC sequences (titles, hyperlinks) and lone two-byte escapes
_ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[@-Z\\-_]")
_INVISIBLE = str.maketrans({
    "\ufeff": "", "\u200b": "", "\u200e": "", "\u200f": "",
    "\u00a0": " ", "\u2007": " ", "\u202f": " ", "\u2002": " ", "\u2003": " ", "\u2009": " ",
})
#: lines tiup prints around a command's output (its update check and launcher), never part of the output
_TIUP_NOISE = re.compile(
    r"^\s*(?:tiup is checking updates for component .*"
    r"|A new version of .* is available.*"
    r"|(?:The latest version|Local installed version|Update current component|Update all components):.*"
    r"|Starting component [`'].*)$"
)
_QUOTE = re.compile(r"^[ \t]*(?:> ?)+")
_FENCE = re.compile(r"^\s*(?:```|~~~)\S*\s*$")


def clean_pasted(text: str, *, tabsize: int = 8) -> str:
    """The text as tiup printed it, whatever a terminal or a mail client added.

    Tabs become spaces (``tabsize`` columns a stop): YAML forbids tabs for indentation.
    """
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    text = _ANSI.sub("", text).translate(_INVISIBLE)
    lines = [ln.rstrip() for ln in text.split("\n")]
    if sum(1 for ln in lines if _QUOTE.match(ln)) * 2 >= sum(1 for ln in lines if ln.strip()) > 0:
        # a quoted paste: strip every level of '>' (a bare '>' line is a quoted blank line)
        lines = [_QUOTE.sub("", ln, count=1) for ln in lines]
    # removed lines become blank ones, so line numbers in errors still match the user's file
    lines = ["" if _FENCE.match(ln) or _TIUP_NOISE.match(ln) else ln.expandtabs(tabsize) for ln in lines]
    return "\n".join(lines).rstrip("\n") + "\n"


_YAML_LINE = re.compile(r"^(?:\s|-(?:\s|$)|#|---|\.\.\.|[A-Za-z_][\w.-]*:(?:\s|$)|[\"'][^\"']+[\"']:(?:\s|$)|\{)")


def yaml_body(text: str) -> str:
    """``text`` without the shell prompt / command lines a paste has before and after the YAML."""
    lines = text.split("\n")
    start = 0
    while start < len(lines) and not (lines[start].strip() and _YAML_LINE.match(lines[start])):
        start += 1
    end = len(lines)
    while end > start and not (lines[end - 1].strip() and _YAML_LINE.match(lines[end - 1])):
        end -= 1
    kept = [""] * start + lines[start:end]  # blank, not dropped: line numbers stay the file's
    return textwrap.dedent("\n".join(kept)) + "\n"


# -- strict YAML: wanbench.strictyaml ------------------------------------------------------------------------------


def where(source: str, container: Any, key: Any = None) -> str:
    """``file:line`` of ``key`` in ``container`` (or of the container), as precise as the data allows."""
    line = 0
    if key is not None and isinstance(container, LineDict):
        line = container.lines.get(key, 0)
    elif key is not None and isinstance(container, LineList) and isinstance(key, int) and key < len(container.lines):
        line = container.lines[key]
    line = line or getattr(container, "line", 0)
    return f"{source}:{line}" if line else source


def get_int(data: Mapping[str, Any], key: str, default: int, *, source: str, what: str | None = None,
            low: int = 1, high: int = 65535) -> int:
    """An integer setting in [low, high]; anything else is a ``ConfigError`` at its line."""
    if key not in data or data[key] is None:
        return default
    value = data[key]
    ok = isinstance(value, int) and not isinstance(value, bool)
    if not ok and isinstance(value, str) and re.fullmatch(r"\s*\d+\s*", value):
        value, ok = int(value), True
    if not ok or not low <= value <= high:
        raise ConfigError(f"{where(source, data, key)}: {what or key}: {data[key]!r} is not a whole number "
                          f"from {low} to {high}")
    return int(value)


def get_float(data: Mapping[str, Any], key: str, default: float, *, source: str, what: str | None = None,
              low: float = 0.0, high: float = 3600.0) -> float:
    """A number of seconds (or similar) in (low, high]; anything else is a ``ConfigError`` at its line."""
    if key not in data or data[key] is None:
        return default
    value = data[key]
    try:
        if isinstance(value, bool):
            raise ValueError
        number = float(value)
    except (TypeError, ValueError):
        number = float("nan")
    if not low < number <= high:  # also false for NaN
        raise ConfigError(f"{where(source, data, key)}: {what or key}: {value!r} is not a number "
                          f"above {low:g} and at most {high:g}")
    return number


def get_str(data: Mapping[str, Any], key: str, default: str | None, *, source: str,
            what: str | None = None) -> str | None:
    """A scalar setting as text; a list or mapping where text belongs is a ``ConfigError``."""
    if key not in data or data[key] is None:
        return default
    value = data[key]
    if isinstance(value, (dict, list)):
        raise ConfigError(f"{where(source, data, key)}: {what or key} must be a single value, not a "
                          f"{'mapping' if isinstance(value, dict) else 'list'}")
    return str(value)
