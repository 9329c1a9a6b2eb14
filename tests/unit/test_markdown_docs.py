"""The project's Markdown renders as written: every code block closes where it was meant to."""

import glob
import os
import re

import pytest

from support.paths import REPO

# A fence opens with three or more backticks or tildes (and an info string); it closes with the
# same character, at least as many, and nothing after them but spaces (CommonMark 4.5).
_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})(.*)$")


def _markdown_files():
    found = [os.path.join(REPO, "README.md")]
    for pattern in ("docs/*.md", "bench/**/*.md"):
        found += glob.glob(os.path.join(REPO, pattern), recursive=True)
    return sorted(found)


def fence_problems(lines) -> list[str]:
    """Lines where a fence does not close as intended, and a fence left open at the end."""
    problems, open_fence = [], None
    for n, line in enumerate(lines, 1):
        m = _FENCE.match(line.rstrip("\n"))
        if m is None:
            continue
        fence, rest = m.groups()
        if open_fence is None:
            open_fence = (n, fence)
        elif fence[0] == open_fence[1][0] and len(fence) >= len(open_fence[1]):
            if rest.strip():
                opened = open_fence[0]
                problems.append(f"line {n}: text after the fence that closes line {opened}'s block: {line.strip()!r}")
            open_fence = None
    if open_fence is not None:
        problems.append(f"line {open_fence[0]}: a code block never closed")
    return problems


def test_the_checker_finds_a_closing_fence_with_text_after_it():
    doc = ["intro", "```yaml", "- run: x", "``` The JSON follows", "more", "```bash", "y", "```"]
    assert fence_problems(doc) == ["line 4: text after the fence that closes line 2's block: '``` The JSON follows'"]
    assert fence_problems(["```", "code"]) == ["line 1: a code block never closed"]
    assert fence_problems(["````md", "```", "inner", "```", "````"]) == []


@pytest.mark.parametrize("path", _markdown_files(), ids=lambda p: os.path.relpath(p, REPO))
def test_code_blocks_close_where_they_are_meant_to(path):
    with open(path, encoding="utf-8") as f:
        assert fence_problems(f.readlines()) == []
