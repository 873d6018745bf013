"""Docstrings and comments say what and why; measured figures live in docs/benchmarks.md.

A timing in a docstring is true of one machine on one day and drifts from the code (issue 40
item 3). This test reads every docstring (module, class, function, and the bare string
statements that document attributes) and every comment of ``muflow/`` and ``flows/``, and
fails on anything that reads as a measurement: a duration with a decimal point or in
milliseconds or microseconds, a duration after "took", "takes", "cost", "about", a speed-up
ratio ("2.2x", "1.5x faster"), "measured on/here/there", a load average, the benchmarks'
logs, or the machine they ran on. Durations that are settings ("a line every 2 s", "within
5 s") are whole seconds after no such word, and pass; so do counts that any machine
reproduces (kernel values computed, iterations), and sizes that are arithmetic
(``n**2 * itemsize``).
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCANNED = ("muflow", "flows")

_NUMBER = r"\d[\d,]*(?:\.\d+)?"
_TIME_UNIT = r"(?:s|secs?|seconds?|ms|milliseconds?|us|µs|microseconds?|ns|min|minutes?)\b"
#: Each pattern names one way a measured figure shows in prose.
PATTERNS = {
    "a duration with decimals": re.compile(rf"\b\d[\d,]*\.\d+ ?{_TIME_UNIT}"),
    "a duration in ms/us/ns": re.compile(rf"\b{_NUMBER} ?(?:ms|us|µs|ns|milliseconds?|microseconds?)\b"),
    "a measured duration": re.compile(
        rf"\b(?:took|takes|take|taking|cost|costs|about|spent|in|against|from|to|of) "
        rf"{_NUMBER}(?:\s?[-/]\s?{_NUMBER})? ?(?:s|secs?|seconds?|min|minutes?)\b"
        r"|\btook (?:about |a |the |only )*(?:quarter|half|third|second|minute|\d)"),
    "a measured size": re.compile(
        rf"\b(?:allocated|allocates|peak(?:ed)?|used|uses) (?:about |up to |at most )?{_NUMBER} ?"
        r"(?:kB|KB|MB|GB|KiB|MiB|GiB)\b"),
    "figures side by side": re.compile(
        rf"\b{_NUMBER} ?(?:s|ms|us|kB|MB|GB|MiB|GiB) against {_NUMBER} ?(?:s|ms|us|kB|MB|GB|MiB|GiB)?\b"),
    "a speed-up ratio": re.compile(rf"\b{_NUMBER} ?x\b(?! ?\d)|\bx (?:faster|slower)\b"
                                   r"|\b(?:beat|beats|won|wins|faster|slower|saved|saves|cut|cuts)\b"
                                   r"[^.;]{0,60}\bby \d+(?:[.-]\d+)? ?%"),
    "a measurement": re.compile(r"\bmeasured(?: (?:on|here|there|at|with|best|in process)\b|[:,])"
                                r"|\(measured\b"),
    "a load average": re.compile(r"\bload(?: average)? \d|\bloaded \d-core|\bload average\b"),
    "a benchmark log": re.compile(r"benchmarks/out|\b\w+_s\d+(?:_\w+)?\.log\b|\bsession \d+\b"),
    "the benchmark machine": re.compile(r"\b\d-core (?:machine|VM)\b|\bAMD EPYC\b"),
}


def _docstrings(tree: ast.AST):
    """(first line, text) of every docstring: the first statement of a module, class or
    function, and any other bare string statement (attribute docstrings)."""
    for node in ast.walk(tree):
        if (isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
                and isinstance(node.value.value, str)):
            yield node.value.lineno, node.value.value


def _comments(source: str):
    """(first line, text) of every run of comments on consecutive lines, joined by newlines."""
    run_start, run = None, []
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type != tokenize.COMMENT:
            continue
        line = token.start[0]
        if run and line == run_start + len(run):
            run.append(token.string.lstrip("#:").strip())
            continue
        if run:
            yield run_start, "\n".join(run)
        run_start, run = line, [token.string.lstrip("#:").strip()]
    if run:
        yield run_start, "\n".join(run)


def prose(path: Path):
    """(first line, text) of the docstrings and comment runs of one source file."""
    source = path.read_text(encoding="utf-8")
    yield from _docstrings(ast.parse(source, filename=str(path)))
    yield from _comments(source)


def measured_figures(path: Path, root: Path = ROOT) -> list[str]:
    """``file:line: what (text)`` for each measurement in the prose of ``path``, the file
    named relative to ``root``. A figure broken across two lines ("about\n10 s") is found:
    each text is searched with its line breaks read as spaces."""
    found = set()
    for first, text in prose(path):
        flat = re.sub(r"\s*\n\s*", lambda m: " " + "\n" * m.group(0).count("\n"), text)
        flat_search = flat.replace("\n", "")
        for what, pattern in PATTERNS.items():
            for match in pattern.finditer(flat_search):
                # the line of the match: line breaks dropped before its start
                prefix = flat_search[:match.start()]
                line = first + _breaks_before(flat, len(prefix))
                found.add(f"{path.relative_to(root)}:{line}: {what} ({match.group(0)!r})")
    return sorted(found, key=lambda hit: int(hit.split(":")[1]))


def _breaks_before(flat: str, position: int) -> int:
    """Line breaks in ``flat`` before its ``position``-th character that is not a break."""
    seen = breaks = 0
    for char in flat:
        if char == "\n":
            breaks += 1
            continue
        if seen == position:
            break
        seen += 1
    return breaks


def sources():
    return sorted(p for top in SCANNED for p in (ROOT / top).rglob("*.py"))


def test_no_measured_figures_in_docstrings_or_comments():
    found = [hit for path in sources() for hit in measured_figures(path)]
    assert not found, (
        "measured figures in docstrings or comments (move each to docs/benchmarks.md with "
        "the command that produced it, and keep only the reasoning here):\n" + "\n".join(found))


@pytest.mark.parametrize("text", [
    "a8a.t: 0.11-0.21 s against 0.17-0.54 s with BLAS threads alone",
    "1.5x faster than one at a time, measured on 800 float32 rows",
    "a round trip to the workers about 10 ms",
    "(it took 562 s with SMO on rows)",
    "costs another compilation of about 30 s",
    "where float32 predicts them 2.2x faster",
    "on a loaded 2-core machine",
    "(benchmarks/out/sweep_rows_20000.log)",
    "measured here: 1.5 to 4 s per GiB",
    "0.57 s / 0.52 s at 8,000 rows",
    "A pass of the unflipped path allocated about 6 MB at n = 4000",
    "256 MB against 2000 MB doubled the solves",
    "Drawing every point took about a second per plot",
    "on a8a, 2000 and 8000 rows, it beat cold solves by 15-20%",
])
def test_patterns_catch_measurements(tmp_path, text):
    """Each kind of figure the cleaned tree once held is caught, in a comment and in a
    docstring, with the file and line named."""
    path = tmp_path / "module.py"
    path.write_text(f'"""Module.\n\n{text}\n"""\n\nx = 1  # {text}\n', encoding="utf-8")
    hits = measured_figures(path, tmp_path)
    assert {h.split(":")[1] for h in hits} == {"3", "6"}, hits
    assert all(h.startswith("module.py:") for h in hits)


def test_figure_across_a_line_break_is_found(tmp_path):
    """A figure the text wraps ("about" at one line's end, "10 s" at the next's start) is
    found, and named by the line it ends on, in a docstring and in a comment run."""
    path = tmp_path / "module.py"
    path.write_text('def f():\n    """Start the server (about\n    10 s: its imports)."""\n\n'
                    '# a float32 Gram compiled apart took\n# 8 s per child\nx = 1\n',
                    encoding="utf-8")
    hits = measured_figures(path, tmp_path)
    assert {h.split(":")[1] for h in hits} == {"2", "5"}, hits


@pytest.mark.parametrize("text", [
    "Print a line every 2 s while a fit takes longer than 2 s",
    "Terminate the server, killing it if it has not gone within 5 s.",
    "a float32 cache holds twice the rows",
    "The margin of every step is measured (eq. 12 from each sample)",
    "memory use scales as k * n * n",
    "rows 2n/k long, the row cache holding k/2 times more of them",
    "exp(-gamma * ||x - y||^2) (eq. 3)",
    "a dense BLAS product is much faster than a sparse-sparse product",
    "the cache of this machine's memory; object stores are not measured",
    "the step with the largest measured margin, not measured ones",
    "K of 32,768 samples takes 4 GiB in float32",
    "kernel values computed, shared against each fold on its own: 174 against 343 million",
])
def test_patterns_pass_settings_and_reasoning(tmp_path, text):
    """Settings, reasoning and the papers' vocabulary are not measurements."""
    path = tmp_path / "module.py"
    path.write_text(f'"""{text}"""\n\nx = 1  # {text}\n', encoding="utf-8")
    assert measured_figures(path, tmp_path) == []
