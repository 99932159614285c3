"""The manual tells the truth about the command line: every pytest option,
``python -m wanbench`` subcommand and option, script, bench and test path
that README.md or docs/ shows exists, and every local link resolves."""

from __future__ import annotations

import functools
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"```[a-z]*\n(.*?)```", re.S)
INLINE = re.compile(r"`([^`\n]+)`")
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")
#: where a shown command starts: the suite, the CLI, the project's scripts
STARTS = (".venv/bin/pytest", "pytest", "python -m wanbench", ".venv/bin/python -m wanbench", "scripts/", "bench/",
          ".venv/bin/python bench/", "wanbench ")


def commands(text: str) -> list[str]:
    """Shell commands shown in code blocks and inline code, one per line,
    comments and prompts stripped, continuation lines joined."""
    found: list[str] = []
    blocks = FENCE.findall(text)
    for block in blocks:
        joined = re.sub(r"\\\n\s*", " ", block)
        for line in joined.splitlines():
            line = re.sub(r"^\s*\$ ", "", line).split(" #")[0].strip()
            if line.startswith(STARTS):
                found.append(" ".join(line.split()))
    prose = FENCE.sub("", text)
    found += [c.strip() for c in INLINE.findall(prose) if c.strip().startswith(STARTS[:4])]
    return found


@functools.lru_cache(maxsize=None)
def help_text(*args: str) -> str:
    res = subprocess.run([sys.executable, *args, "--help"], cwd=ROOT, capture_output=True, text=True, timeout=120,
                         check=False)
    return res.stdout + res.stderr


def options_of(cmd: list[str]) -> list[str]:
    return [t.split("=", 1)[0] for t in cmd if t.startswith("--")]


def check(cmd_text: str) -> list[str]:
    """What is wrong with one shown command ([] = nothing)."""
    try:
        cmd = shlex.split(cmd_text)
    except ValueError as exc:
        return [f"cannot parse: {exc}"]
    problems: list[str] = []
    if cmd[0].endswith("pytest"):
        known = help_text("-m", "pytest", "-p", "no:randomly")
        problems += [f"pytest has no option {o}" for o in options_of(cmd[1:]) if not re.search(rf"\s{re.escape(o)}\b",
                                                                                              known)]
        for t in cmd[1:]:
            if re.match(r"^(tests|selftests)/", t) and not (ROOT / t.split("::")[0]).exists():
                problems.append(f"no such path {t}")
        return problems
    if "-m" in cmd and "wanbench" in cmd[cmd.index("-m") + 1:cmd.index("-m") + 2] or cmd[0] == "wanbench":
        rest = cmd[cmd.index("wanbench") + 1:] if cmd[0] != "wanbench" else cmd[1:]
        sub = rest[0] if rest else ""
        top = help_text("-m", "wanbench")
        if sub and not sub.startswith("-") and sub not in top:
            return [f"python -m wanbench has no subcommand {sub!r}"]
        known = help_text("-m", "wanbench", sub) if sub and not sub.startswith("-") else top
        problems += [f"python -m wanbench {sub} has no option {o}" for o in options_of(rest)
                     if not re.search(rf"{re.escape(o)}\b", known)]
        return problems
    script = next((t for t in cmd if t.startswith(("scripts/", "bench/"))), None)
    if script and not (ROOT / script).exists():
        problems.append(f"no such script {script}")
    elif script and script.startswith("bench/") and options_of(cmd):
        known = help_text(str(ROOT / script))
        problems += [f"{script} has no option {o}" for o in options_of(cmd) if not re.search(rf"{re.escape(o)}\b",
                                                                                              known)]
    return problems


@pytest.mark.parametrize("page", PAGES, ids=[p.name for p in PAGES])
def test_every_command_shown_uses_real_options_and_paths(page: Path) -> None:
    text = page.read_text()
    bad = {c: p for c in commands(text) if (p := check(c))}
    assert not bad, f"{page.name}: " + "; ".join(f"`{c}`: {', '.join(p)}" for c, p in bad.items())


@pytest.mark.parametrize("page", PAGES, ids=[p.name for p in PAGES])
def test_every_local_link_resolves(page: Path) -> None:
    missing = [t for t in LINK.findall(page.read_text()) if "://" not in t and not (page.parent / t).exists()]
    assert not missing, f"{page.name} links to missing files: {missing}"


def test_the_manual_shows_commands_at_all() -> None:
    """Guard against a parser that finds nothing and so checks nothing."""
    shown = [c for page in PAGES for c in commands(page.read_text())]
    assert len(shown) >= 40, shown
    assert any("--baseline-runs" in c for c in shown)


def test_readme_is_the_first_day_only() -> None:
    assert len((ROOT / "README.md").read_text().splitlines()) < 300


def test_the_checker_catches_what_it_should() -> None:
    assert check(".venv/bin/pytest tests/rtt --rtt 0,50ms") == []
    assert check(".venv/bin/pytest --no-such-option 1") == ["pytest has no option --no-such-option"]
    assert check(".venv/bin/pytest tests/nowhere") == ["no such path tests/nowhere"]
    assert check("python -m wanbench lab up --nonsense") == ["python -m wanbench lab has no option --nonsense"]
    assert check("scripts/absent") == ["no such script scripts/absent"]
    block = "```sh\n$ .venv/bin/pytest -k x \\\n  --rounds 3   # c\n```\n"
    assert commands(block) == [".venv/bin/pytest -k x --rounds 3"]
