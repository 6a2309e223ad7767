"""No import cycles in trace_gym, trace_diagnose and trace_train.

The import graph comes from grimp (the library behind import-linter): every ``import`` and
``from ... import`` statement of every module, at module level or inside a function, guarded
by ``if TYPE_CHECKING:`` or not. A cycle between two modules is an error, and so is one
between the subpackages of a package (``trace_gym.core`` -> ``trace_gym.world`` ->
``trace_gym.core``), where each top-level module counts as its own unit.

trace_gym's units are each either library or tooling (``TRACE_GYM_LIBRARY``,
``TRACE_GYM_TOOLING``), and no library unit imports a tooling one.

No package may have a cycle. ``KNOWN_TRACE_GYM_CYCLES`` is empty (issue 28 removed the last
five); it stays as the one place an exception would have to be argued for (a stale entry
fails).
"""

from __future__ import annotations

import graphlib
import textwrap

import pytest

grimp = pytest.importorskip("grimp", reason="the [dev] extra installs grimp")

PACKAGES = ("trace_gym", "trace_diagnose", "trace_train")

KNOWN_TRACE_GYM_CYCLES: dict[tuple[str, str], str] = {
    # (importer, imported), each a module or a package standing for its modules: the import
    # allowed for now, and the cycle it closes. Empty this, entry by entry.
}


# trace_gym's two halves (see its package docstring), unit by unit as :func:`units` counts them:
# a new top-level module or folder must be placed in one, and the library imports no tooling.
TRACE_GYM_LIBRARY = frozenset(
    {
        "trace_gym",
        "trace_gym.core",
        "trace_gym.world",
        "trace_gym.envs",
        "trace_gym.agents",
        "trace_gym.registration",
        "trace_gym.episodes",
        "trace_gym.errors",
        "trace_gym.sandbox",  # the SWE environments run agent code in it
        "trace_gym.primitives",  # seeding and tool declarations (the spec half of issue 28)
    }
)
TRACE_GYM_TOOLING = frozenset(
    {
        "trace_gym.testing",
        "trace_gym.validation",
        "trace_gym.synthesis",
        "trace_gym.serving",
        "trace_gym.integrations",
        "trace_gym.examples",
        "trace_gym.cli",
    }
)


def build_import_graph(*packages: str) -> dict[str, set[str]]:
    """Module -> the modules of ``packages`` it imports (function-level and TYPE_CHECKING
    imports included)."""
    graph = grimp.build_graph(*packages, cache_dir=None, exclude_type_checking_imports=False)
    return {m: set(graph.find_modules_directly_imported_by(m)) for m in graph.modules}


def _within(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


def allowed(importer: str, imported: str, allow: dict[tuple[str, str], str]) -> bool:
    return any(_within(importer, a) and _within(imported, b) for a, b in allow)


def without_allowed(
    graph: dict[str, set[str]], allow: dict[tuple[str, str], str]
) -> dict[str, set[str]]:
    return {m: {i for i in imports if not allowed(m, i, allow)} for m, imports in graph.items()}


def units(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """The graph between the units of each package: its subpackages (all their modules as
    one) and its top-level modules; imports inside one unit are left out."""
    packages = {p for p in graph for m in graph if m.startswith(p + ".")}

    def unit(module: str) -> str:
        parts = module.split(".")
        return ".".join(parts[:2]) if ".".join(parts[:2]) in packages and len(parts) > 2 else module

    out: dict[str, set[str]] = {}
    for module, imports in graph.items():
        out.setdefault(unit(module), set()).update(
            unit(i) for i in imports if unit(i) != unit(module)
        )
    return out


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle of ``graph`` (``[a, b, ..., a]``), or None."""
    try:
        graphlib.TopologicalSorter(graph).prepare()
    except graphlib.CycleError as exc:
        return list(reversed(exc.args[1]))  # graphlib lists it against the import direction
    return None


@pytest.fixture(scope="module")
def graph() -> dict[str, set[str]]:
    return build_import_graph(*PACKAGES)


def test_no_module_imports_itself_back(graph):
    cycle = find_cycle(without_allowed(graph, KNOWN_TRACE_GYM_CYCLES))
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_no_subpackage_imports_itself_back(graph):
    cycle = find_cycle(units(without_allowed(graph, KNOWN_TRACE_GYM_CYCLES)))
    assert cycle is None, "import cycle between packages: " + " -> ".join(cycle)


def test_every_trace_gym_unit_is_library_or_tooling(graph):
    found = {u for u in units(graph) if _within(u, "trace_gym")}
    assert found - TRACE_GYM_LIBRARY - TRACE_GYM_TOOLING == set(), (
        "place each new trace_gym module or folder in TRACE_GYM_LIBRARY or TRACE_GYM_TOOLING"
    )


def test_the_trace_gym_library_imports_no_tooling(graph):
    between = units(graph)
    wrong = sorted(
        f"{unit} -> {imported}"
        for unit in TRACE_GYM_LIBRARY
        for imported in between.get(unit, ())
        if imported in TRACE_GYM_TOOLING
    )
    assert wrong == [], "library imports tooling: " + ", ".join(wrong)


def test_trace_train_and_trace_diagnose_have_no_allowed_cycle():
    assert all(a.startswith("trace_gym.") for pair in KNOWN_TRACE_GYM_CYCLES for a in pair)


@pytest.mark.parametrize(("importer", "imported"), sorted(KNOWN_TRACE_GYM_CYCLES))
def test_every_allowed_import_still_exists(graph, importer, imported):
    """An entry whose import is gone must leave the list (so that it only ever shrinks)."""
    assert any(
        _within(m, importer) and any(_within(i, imported) for i in imports)
        for m, imports in graph.items()
    ), f"{importer} no longer imports {imported}: delete its entry from KNOWN_TRACE_GYM_CYCLES"


def test_the_checker_sees_function_level_and_type_checking_imports(tmp_path, monkeypatch):
    """A package whose only cycles close inside a function or under TYPE_CHECKING."""
    pkg = tmp_path / "cyclepkg"
    (pkg / "sub").mkdir(parents=True)
    files = {
        "__init__.py": "",
        "a.py": "from cyclepkg import b\n",
        "b.py": "def later():\n    from cyclepkg import a\n    return a\n",
        "c.py": "from cyclepkg import d\n",
        "d.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from cyclepkg.c import X\n",
        "sub/__init__.py": "",
        "sub/e.py": "from cyclepkg import f\n",
        "f.py": "from cyclepkg.sub import g\n",
        "sub/g.py": "",
    }
    for name, text in files.items():
        (pkg / name).write_text(textwrap.dedent(text))
    monkeypatch.syspath_prepend(str(tmp_path))
    found = build_import_graph("cyclepkg")
    function_level, type_checking = ("cyclepkg.b", "cyclepkg.a"), ("cyclepkg.d", "cyclepkg.c")
    only_function_level = without_allowed(found, {type_checking: "the other cycle"})
    assert set(find_cycle(only_function_level)) == {"cyclepkg.a", "cyclepkg.b"}
    only_type_checking = without_allowed(found, {function_level: "the other cycle"})
    assert set(find_cycle(only_type_checking)) == {"cyclepkg.c", "cyclepkg.d"}
    neither = without_allowed(found, {function_level: "", type_checking: ""})
    assert find_cycle(neither) is None  # e -> f -> g is no module cycle, but sub <-> f is one
    assert set(find_cycle(units(neither))) == {"cyclepkg.sub", "cyclepkg.f"}
