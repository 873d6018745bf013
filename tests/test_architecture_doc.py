"""docs/architecture.md names every module and package of muflow/ (issue 40 item 4).

A newcomer looks up where a change goes in that page; a module it does not name is one the
page has drifted from. Modules are named by file name (``kernel_rows.py``) or, inside a
package, by the package's row or by their own name.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "architecture.md"


def unnamed_modules(doc_text: str, package: Path) -> list[str]:
    """Modules and packages under ``package`` whose file (or folder) name the text never
    mentions, as paths relative to the package's parent."""
    names = set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*(?:\.py|/)", doc_text))
    missing = []
    for path in sorted(package.rglob("*.py")):
        if "__pycache__" in path.parts:
            continue
        if path.name == "__init__.py":
            # a package is named by its folder ("gram/"), the top package by its __init__.py
            wanted = "__init__.py" if path.parent == package else f"{path.parent.name}/"
        else:
            wanted = path.name
        if wanted not in names:
            missing.append(str(path.relative_to(package.parent)))
    return missing


def test_architecture_doc_names_every_module():
    missing = unnamed_modules(DOC.read_text(encoding="utf-8"), ROOT / "muflow")
    assert not missing, (f"{DOC.relative_to(ROOT)} does not name these modules: say what each "
                         f"owns in its table: {', '.join(missing)}")


def test_a_module_left_out_is_reported(tmp_path):
    package = tmp_path / "pkg"
    (package / "sub").mkdir(parents=True)
    for name in ("__init__.py", "named.py", "forgotten.py", "sub/__init__.py", "sub/inner.py"):
        (package / name).write_text("", encoding="utf-8")
    text = "`__init__.py` the facade; `named.py` a module; `sub/`: `inner.py`"
    assert unnamed_modules(text, package) == ["pkg/forgotten.py"]
