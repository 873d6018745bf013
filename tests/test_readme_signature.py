"""The README's ``SVC(...)`` signature is the estimator's own.

The README writes out ``muflow.SVC``'s parameters with their defaults; a parameter added to
the estimator and not to that line (``time_limit``, ``device``, ``n_jobs`` were missing from
it for several releases) is one a reader of the README never learns of.
"""

from __future__ import annotations

import ast
import inspect
import re
from pathlib import Path

import muflow

README = Path(__file__).resolve().parents[1] / "README.md"


def readme_signature(text: str) -> list[tuple[str, object]]:
    """The (name, default) pairs of the README's `SVC(...)` signature, in order."""
    match = re.search(r"`SVC\((.*?)\)`:", text, flags=re.S)
    assert match, "README.md has no `SVC(...)`: signature line"
    # parse it as a Python function's parameters: the same grammar
    source = "def SVC(" + " ".join(match.group(1).split()) + "): pass"
    args = ast.parse(source).body[0].args
    positional = args.args
    pos_defaults = [None] * (len(positional) - len(args.defaults)) + list(args.defaults)
    pairs = [(a.arg, d) for a, d in zip(positional, pos_defaults)]
    pairs += list(zip((a.arg for a in args.kwonlyargs), args.kw_defaults))
    return [(name, ast.literal_eval(d) if d is not None else inspect.Parameter.empty)
            for name, d in pairs]


def test_the_readmes_signature_names_every_parameter_with_its_default():
    written = readme_signature(README.read_text(encoding="utf-8"))
    actual = [(p.name, p.default) for p in inspect.signature(muflow.SVC).parameters.values()]
    assert [name for name, _ in written] == [name for name, _ in actual], (
        "README.md's SVC(...) line and muflow.SVC's parameters differ: write the line from "
        "inspect.signature(muflow.SVC)")
    assert written == actual


def test_a_parameter_missing_from_the_line_is_noticed():
    line = '`SVC(kernel="rbf", *, C=1.0)`: every parameter'
    assert readme_signature(line) == [("kernel", "rbf"), ("C", 1.0)]
    actual = [(p.name, p.default) for p in inspect.signature(muflow.SVC).parameters.values()]
    assert readme_signature(line) != actual
