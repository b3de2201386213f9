"""The docs name only modules that exist, and the contract's library API imports as written:
what it lists from `stream_adapter` is exactly the package's `__all__`, each name documented."""

from __future__ import annotations

import ast
import importlib
import inspect
import itertools
import re
import textwrap
from pathlib import Path

import pytest

import stream_adapter
import stream_adapter.client
from tests.harness import ROOT

PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
PACKAGE = ROOT / "stream_adapter"
DEV_PACKAGE = ROOT / "dev" / "stream_adapter_dev"
PY_PATH = re.compile(r"(?<![\w/.-])((?:[A-Za-z_]\w*/)+[A-Za-z_]\w*\.py)\b")
"""`stream_adapter/x.py`, `tests/unit/x.py`, and paths inside the package such as
`stream/engine/consumer.py` or `engine/commits/gate.py`."""
PACKAGE_PATH = re.compile(r"(?<![\w/.-])(stream_adapter/[\w./-]*[\w/])")
"""Any path under the package, a folder or a non-Python file too (`stream_adapter/review/`)."""
DOTTED = re.compile(r"(?<![\w./-])(stream_adapter(?:_dev)?(?:\.[A-Za-z_]\w*)+)")
NOT_MODULES = {"stream_adapter.run_envelope": ROOT / "examples" / "celery_app.py"}
"""Dotted names that are not Python names, and the file that defines each (a Celery task name)."""
PACKAGE_FILES = [
    p.relative_to(ROOT).as_posix()
    for p in (*PACKAGE.rglob("*"), *DEV_PACKAGE.rglob("*"))
    if p.is_file()
]
"""The runtime's files and the developer tooling's (`chaos/scenario.py` names the latter's)."""


def missing_paths(text: str) -> list[str]:
    """The `.py` and package paths in text that name no file or folder of the repository."""
    out = []
    for path in PY_PATH.findall(text):
        if any((base / path).exists() for base in (ROOT, PACKAGE, DEV_PACKAGE)):
            continue
        if not any(f.endswith("/" + path) for f in PACKAGE_FILES):
            out.append(path)
    others = [p for p in PACKAGE_PATH.findall(text) if not p.endswith(".py")]
    out += [p for p in others if not (ROOT / p).exists()]
    return out


def resolves(dotted: str) -> bool:
    """dotted is an importable module, or an attribute path below the longest one that is."""
    parts = dotted.split(".")
    for end in range(len(parts), 0, -1):
        try:
            found: object = importlib.import_module(".".join(parts[:end]))
        except ModuleNotFoundError:
            continue
        for name in parts[end:]:
            if not hasattr(found, name):
                return False
            found = getattr(found, name)
        return True
    return False


def missing_names(text: str) -> list[str]:
    return [d for d in DOTTED.findall(text) if d not in NOT_MODULES and not resolves(d)]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_docs_name_files_that_exist(page: Path) -> None:
    assert not missing_paths(page.read_text()), page.name


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_docs_name_modules_that_exist(page: Path) -> None:
    assert not missing_names(page.read_text()), page.name


def test_the_scan_finds_wrong_names() -> None:
    text = (
        "see `stream_adapter/stream/engine/consumer.py`, `engine/commits/gate.py` and "
        "`stream_adapter.stream.engine`; not `stream_adapter/nothing.py`, "
        "`stream/engine/nowhere.py`, `stream_adapter/gone/` or `stream_adapter.stream.nothing`"
    )
    assert missing_paths(text) == [
        "stream_adapter/nothing.py",
        "stream/engine/nowhere.py",
        "stream_adapter/gone/",
    ]
    assert missing_names(text) == ["stream_adapter.stream.nothing"]


def test_names_that_are_not_modules_are_still_defined() -> None:
    for name, where in NOT_MODULES.items():
        assert f'"{name}"' in where.read_text(), name


def library_api() -> list[tuple[str, str]]:
    """(name, module) for every row of the contract's §14."""
    contract = (ROOT / "docs" / "contract.md").read_text()
    section = contract[contract.index("## 14. ") : contract.index("## 15. ")]
    rows = []
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split(" | ")]
        if not line.startswith("| `") or len(cells) != 3:
            continue
        module = re.fullmatch(r"`([\w.]+)`", cells[2])
        assert module, line
        rows += [(name, module.group(1)) for name in re.findall(r"`(\w+)`", cells[0])]
    return rows


API = library_api()


@pytest.mark.parametrize("name, module", API, ids=[f"{m}.{n}" for n, m in API])
def test_the_contract_api_imports_as_written(name: str, module: str) -> None:
    assert hasattr(importlib.import_module(module), name), f"{name} from {module}"


def test_the_contract_lists_every_exported_name() -> None:
    listed = set(API)
    for package in (stream_adapter, stream_adapter.client):
        missing = [n for n in package.__all__ if (n, package.__name__) not in listed]
        assert not missing, f"{package.__name__}: {missing}"


def test_the_contract_lists_exactly_the_package_exports() -> None:
    """The names §14 lists from `stream_adapter` are its `__all__`, no more and no fewer."""
    listed = {name for name, module in API if module == "stream_adapter"}
    assert listed == set(stream_adapter.__all__)


def export_sources() -> dict[str, str]:
    """The module `stream_adapter/__init__.py` imports each of its names from (the lazy ones
    under TYPE_CHECKING included)."""
    tree = ast.parse((PACKAGE / "__init__.py").read_text())
    sources = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                sources[alias.asname or alias.name] = node.module
    return sources


def attribute_docstring(module: str, name: str) -> str | None:
    """The string right after `name = ...` at the top level of module's source, if any."""
    source = inspect.getsource(importlib.import_module(module))
    for node, after in itertools.pairwise(ast.parse(source).body):
        targets = node.targets if isinstance(node, ast.Assign) else []
        if isinstance(node, ast.AnnAssign):
            targets = [node.target]
        named = any(isinstance(t, ast.Name) and t.id == name for t in targets)
        if named and isinstance(after, ast.Expr) and isinstance(after.value, ast.Constant):
            return after.value.value if isinstance(after.value.value, str) else None
    return None


SOURCES = export_sources()


@pytest.mark.parametrize("name", sorted(stream_adapter.__all__))
def test_every_export_has_its_own_docstring(name: str) -> None:
    """A class or function documents itself (not only its base); a constant or type alias has
    a docstring under its assignment in the module it comes from."""
    value = getattr(stream_adapter, name)
    assert name in SOURCES, f"{name} is not imported by stream_adapter/__init__.py"
    if inspect.isclass(value) or inspect.isfunction(value):
        # From the source: a dataclass without a docstring gets its signature as __doc__.
        node = ast.parse(textwrap.dedent(inspect.getsource(value))).body[0]
        assert isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
        doc = ast.get_docstring(node)
    else:
        doc = attribute_docstring(SOURCES[name], name)
    assert doc and doc.strip(), f"{name} ({SOURCES[name]}) has no docstring"


def test_the_docstring_check_finds_undocumented_names() -> None:
    assert attribute_docstring("stream_adapter.core.envelope", "MAX_ENVELOPE_BYTES")
    assert attribute_docstring("stream_adapter.core.errors", "PROBLEM_TYPE_PREFIX") is None
