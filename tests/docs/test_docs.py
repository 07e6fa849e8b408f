"""The documentation and the source comments speak of the project only (no server needed).

Checked in the README, ``docs/**/*.md`` and ``tests/README.md`` (the *pages*), and in the
comments and docstrings of ``python/pgwire_cdc/**/*.py`` and ``rust/src/**/*.rs`` (the
*sources*):

- no reference to files outside the repository;
- no absolute machine path (``/tmp/`` only in the pages: code may default to it);
- no development history: no "Status" heading, no work sessions or work periods, no
  "before this change";
- in the pages only: no commit hash, no dated figure (dates live in ``benches/results/``),
  every relative link resolves to a file of the repository (and a ``#fragment`` to a
  heading of a Markdown file), and the README stays short.

Each failure names ``file:line``.
"""

from __future__ import annotations

import ast
import functools
import io
import re
import tokenize
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
README_MAX_LINES = 260

PAGES = sorted([README, ROOT / "tests" / "README.md", *(ROOT / "docs").rglob("*.md")])
PYTHON_SOURCES = sorted((ROOT / "python" / "pgwire_cdc").rglob("*.py"))
RUST_SOURCES = sorted((ROOT / "rust" / "src").rglob("*.rs"))

#: Files outside the repository that the project's text must not lean on.
OUTSIDE = re.compile(r"\.\./shared|CONTRACT|seeds/|STYLE\.md|LAKEHOUSE\.md")
#: Absolute paths of one machine.
MACHINE_PATHS = re.compile(r"/work/|/home/")
TMP_PATH = re.compile(r"/tmp/")
#: Words of a development log rather than of the project. ("session" alone is PostgreSQL's
#: and Spark's word; only these phrases are a work session.)
HISTORY = re.compile(
    r"\b(?:this|previous|last) session\b|\bwork (?:session|period)s?\b"
    r"|\bbefore this (?:change|session|commit)\b",
    re.IGNORECASE,
)
STATUS_HEADING = re.compile(r"^#{1,6}\s+Status\b")
#: A commit hash: 7 to 40 lower-case hex digits with at least one digit and one letter.
HEX_WORD = re.compile(r"(?<![\w./#-])[0-9a-f]{7,40}(?![\w-])")
MONTHS = (
    "Jan(?:uary)?|Feb(?:ruary)?|Mar(?:ch)?|Apr(?:il)?|May|June?|July?|Aug(?:ust)?"
    "|Sep(?:t(?:ember)?)?|Oct(?:ober)?|Nov(?:ember)?|Dec(?:ember)?"
)
DATE = re.compile(
    rf"\b(?:19|20)\d\d-(?:0[1-9]|1[0-2])-(?:0[1-9]|[12]\d|3[01])\b"
    rf"|\b(?:{MONTHS})\.? (?:\d{{1,2}}, )?(?:19|20)\d\d\b"
    rf"|\b\d{{1,2}} (?:{MONTHS}) (?:19|20)\d\d\b"
)
#: Epochs are facts about formats, not dates of a measurement.
EPOCHS = {"1970-01-01", "2000-01-01"}
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")


def rel(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


# -- what is checked in each kind of file ----------------------------------------------


def page_lines(path: Path) -> Iterator[tuple[int, str]]:
    """Every line of a Markdown page, with its number."""
    yield from enumerate(path.read_text(encoding="utf-8").splitlines(), start=1)


def python_comment_lines(path: Path) -> Iterator[tuple[int, str]]:
    """The lines of a Python file's comments and docstrings (any bare string statement),
    with their numbers."""
    source = path.read_text(encoding="utf-8")
    lines = source.splitlines()
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            yield token.start[0], token.string
    for node in ast.walk(ast.parse(source)):
        if (
            isinstance(node, ast.Expr)
            and isinstance(node.value, ast.Constant)
            and isinstance(node.value.value, str)
        ):
            end = node.end_lineno or node.lineno
            for number in range(node.lineno, end + 1):
                yield number, lines[number - 1]


def rust_comment_lines(path: Path) -> Iterator[tuple[int, str]]:
    """The lines of a Rust file's comments (``//``, ``///``, ``//!``, ``/* */``), with their
    numbers; string and character literals are skipped, so ``"postgresql://"`` is not a
    comment."""
    text = path.read_text(encoding="utf-8")
    n = len(text)
    i = counted = 0
    line = 1
    while (found := RUST_TOKEN.search(text, i)) is not None:
        i = found.start()
        token = found.group(0)
        line += text.count("\n", counted, i)
        counted = i
        if token == "//":
            end = text.find("\n", i)
            end = n if end < 0 else end
            yield line, text[i:end]
            i = end
        elif token == "/*":
            depth, j = 1, i + 2
            while j < n and depth:
                if text.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif text.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            for offset, part in enumerate(text[i:j].split("\n")):
                yield line + offset, part
            i = j
        elif token.endswith('"') and token != '"':  # a raw string: r"...", br#"..."#
            if i > 0 and _ident(text[i - 1]):
                i += 1
                continue
            close = '"' + token[token.index("r") + 1 : -1]
            end = text.find(close, found.end())
            i = n if end < 0 else end + len(close)
        elif token == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            i = j + 1
        else:
            # A character literal ('a', '\n', '\u{1F600}'); otherwise a lifetime.
            char = CHAR_LITERAL.match(text, i)
            i = char.end() if char else i + 1


RUST_TOKEN = re.compile(r'//|/\*|b?r#*"|"|\'')
CHAR_LITERAL = re.compile(r"'(?:\\u\{[0-9a-fA-F]+\}|\\.|[^\\'\n])'")


def _ident(c: str) -> bool:
    return c.isalnum() or c == "_"


def source_lines() -> Iterator[tuple[Path, int, str]]:
    for path in PYTHON_SOURCES:
        for number, line in python_comment_lines(path):
            yield path, number, line
    for path in RUST_SOURCES:
        for number, line in rust_comment_lines(path):
            yield path, number, line


def all_lines() -> Iterator[tuple[Path, int, str]]:
    for path in PAGES:
        for number, line in page_lines(path):
            yield path, number, line
    yield from source_lines()


def findings(
    lines: Iterator[tuple[Path, int, str]], pattern: re.Pattern[str], keep: Callable[[str], bool]
) -> list[str]:
    out = []
    for path, number, line in lines:
        for match in pattern.finditer(line):
            if keep(match.group(0)):
                out.append(f"{rel(path)}:{number}: {match.group(0)!r} in {line.strip()[:120]!r}")
    return out


def report(problems: list[str], what: str) -> str:
    return f"{len(problems)} {what}:\n" + "\n".join(problems)


def always(_: str) -> bool:
    return True


# -- the checks ------------------------------------------------------------------------


def test_no_reference_outside_the_repository() -> None:
    problems = findings(all_lines(), OUTSIDE, always)
    assert not problems, report(problems, "references to files outside the repository")


def test_no_machine_paths() -> None:
    problems = findings(all_lines(), MACHINE_PATHS, always)
    problems += findings(
        ((p, n, line) for p in PAGES for n, line in page_lines(p)), TMP_PATH, always
    )
    assert not problems, report(problems, "absolute machine paths")


def test_no_development_history() -> None:
    problems = findings(all_lines(), HISTORY, always)
    problems += [
        f"{rel(path)}:{number}: a Status heading"
        for path in PAGES
        for number, line in page_lines(path)
        if STATUS_HEADING.match(line)
    ]
    assert not problems, report(problems, "development-history phrases")


def test_no_commit_hashes_in_the_pages() -> None:
    def hashlike(word: str) -> bool:
        return any(c.isdigit() for c in word) and any(c.isalpha() for c in word)

    problems = findings(
        ((p, n, line) for p in PAGES for n, line in page_lines(p)), HEX_WORD, hashlike
    )
    assert not problems, report(problems, "commit hashes")


def test_no_dated_figures_in_the_pages() -> None:
    problems = findings(
        ((p, n, line) for p in PAGES for n, line in page_lines(p)),
        DATE,
        lambda date: date not in EPOCHS,
    )
    assert not problems, report(
        problems, "dates (dated figures belong in benches/results/, linked from the pages)"
    )


def slug(heading: str) -> str:
    """The anchor GitHub gives a Markdown heading."""
    text = re.sub(r"`|\*\*|__", "", heading.strip().lower())
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


@functools.cache
def anchors(path: Path) -> set[str]:
    found: set[str] = set()
    fenced = False
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and (m := re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)):
            base = slug(m.group(1))
            name, k = base, 1
            while name in found:
                name, k = f"{base}-{k}", k + 1
            found.add(name)
    return found


def test_relative_links_resolve() -> None:
    problems = []
    for path in PAGES:
        fenced = False
        for number, line in page_lines(path):
            if line.startswith("```"):
                fenced = not fenced
            if fenced:
                continue
            for match in LINK.finditer(line):
                target = match.group(1)
                if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # https:, mailto:, ...
                    continue
                file_part, _, fragment = target.partition("#")
                where = f"{rel(path)}:{number}: link {target!r}"
                resolved = (path.parent / file_part).resolve() if file_part else path
                if not resolved.exists():
                    problems.append(f"{where}: no such file")
                elif not resolved.is_relative_to(ROOT):
                    problems.append(f"{where}: outside the repository")
                elif fragment and resolved.suffix == ".md" and fragment not in anchors(resolved):
                    problems.append(f"{where}: no heading #{fragment} in {rel(resolved)}")
    assert not problems, report(problems, "broken links")


def test_the_readme_is_short() -> None:
    lines = len(README.read_text(encoding="utf-8").splitlines())
    assert lines <= README_MAX_LINES, (
        f"README.md:{lines}: {lines} lines, more than {README_MAX_LINES}; move details to docs/"
    )


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('let url = "postgresql://u@h/db"; // see CONTRACT', ["// see CONTRACT"]),
        ("let c = '\"'; // a quote char", ["// a quote char"]),
        ("fn f<'a>(x: &'a str) {} /* block\n comment */", ["/* block", " comment */"]),
        ('let r = r#"// not a comment"#;', []),
    ],
)
def test_rust_comments_are_found(tmp_path: Path, text: str, expected: list[str]) -> None:
    path = tmp_path / "x.rs"
    path.write_text(text, encoding="utf-8")
    assert [line for _, line in rust_comment_lines(path)] == expected
