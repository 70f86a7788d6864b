"""The rules provider's modules form a ladder: each imports only the modules
above it (the order its package docstring gives), at module level, so no
import loop can come back hidden in a function or behind TYPE_CHECKING."""

from __future__ import annotations

import ast
from pathlib import Path

import daemon.extraction.providers.rules as rules

PACKAGE = "daemon.extraction.providers.rules"
ORDER = ["values", "labels", "layout", "fields", "candidates", "label_reader", "totals", "parties", "tables",
         "voting", "engine", "locate"]


def rules_imports(tree: ast.Module) -> list[tuple[str, bool]]:
    """(module of this package imported, whether at module level) for each import."""
    top = {id(node) for node in tree.body}
    out: list[tuple[str, bool]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith(PACKAGE + "."):
            out.append((node.module.removeprefix(PACKAGE + ".").split(".")[0], id(node) in top))
    return out


def test_each_module_imports_only_the_modules_above_it_and_at_module_level() -> None:
    folder = Path(rules.__file__).parent
    assert sorted(p.stem for p in folder.glob("*.py") if p.stem != "__init__") == sorted(ORDER)
    for position, name in enumerate(ORDER):
        source = (folder / f"{name}.py").read_text()
        assert "TYPE_CHECKING" not in source, name
        for imported, at_top in rules_imports(ast.parse(source)):
            assert at_top, f"{name} imports {imported} inside a function"
            assert imported in ORDER[:position], f"{name} imports {imported}, which is not above it"
