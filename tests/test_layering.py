"""The floors of docs/architecture.md, pinned: every import in steadyrl/ (lazy ones inside
functions and those under ``TYPE_CHECKING`` too) points to a room on a lower floor, and no two
rooms import each other, however indirectly. ``python tools/layering.py --edges`` lists them."""

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _layering():
    spec = importlib.util.spec_from_file_location("layering", ROOT / "tools" / "layering.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_room_has_a_floor_in_the_architecture_page():
    layering = _layering()
    rooms = {layering.room_of(m) for m in layering.modules()}
    assert sorted(rooms - set(layering.floors())) == []


def test_no_import_points_sideways_or_up_a_floor():
    ups = [f"{src}:{line} -> {dest}" for src, dest, line in _layering().up_imports()]
    assert ups == []


def test_no_two_rooms_import_each_other():
    layering = _layering()
    assert layering.cycles(layering.room_graph()) == []


def test_the_measure_sees_lazy_and_type_checking_imports(tmp_path):
    """The measure itself: an import inside a function or under TYPE_CHECKING counts."""
    layering = _layering()
    path = tmp_path / "m.py"
    path.write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ..run.state import Run\n"
                    "def f():\n    from ..assembly import setup\n")
    found = {target for target, _, _ in layering.imports_of("steadyrl.trainer.m", path)}
    assert {"steadyrl.run.state", "steadyrl.assembly"} <= found


TEMPLATE_MODULES = {f"steadyrl.agents.{name}" for name in ("chat", "probe", "modes", "messages", "turns", "templating")}


def test_the_chat_template_modules_share_public_helpers_not_private_names():
    layering = _layering()
    private = [f"{src}:{line} imports {name}" for src, name, line in layering.private_imports()
               if src in TEMPLATE_MODULES or name.rsplit(".", 1)[0] in TEMPLATE_MODULES]
    assert private == []


# Folder names the standard Python .gitignore template (and coverage tools, linters and code viewers) treat as
# generated output at any depth: a package folder so named vanishes from a fork that uses the usual ignore file.
GENERATED_NAMES = {"build", "develop-eggs", "dist", "downloads", "eggs", "lib", "lib64", "parts", "sdist", "var",
                   "wheels", "env", "venv", "htmlcov", "site", "target", "instance"}


def test_no_folder_of_the_package_or_tests_has_a_name_ignore_files_treat_as_generated():
    folders = [p for top in ("steadyrl", "tests", "benchmarks", "tools") for p in (ROOT / top).rglob("*")
               if p.is_dir() and "__pycache__" not in p.parts]
    assert [str(p.relative_to(ROOT)) for p in folders if p.name in GENERATED_NAMES] == []
    assert (ROOT / "steadyrl" / "assembly" / "setup.py").is_file()  # the measure sees the package itself


def test_no_two_files_of_a_room_import_each_other():
    """Inside a room too, imports form no circle (lazy and TYPE_CHECKING ones count)."""
    layering = _layering()
    assert layering.cycles(layering.module_graph()) == []


def test_the_file_level_measure_sees_a_cycle_between_two_modules(tmp_path):
    """The measure itself: two modules of one room that import each other (one lazily) form a cycle."""
    layering = _layering()
    graph = {"steadyrl.x.a": {"steadyrl.x.b"}, "steadyrl.x.b": {"steadyrl.x.a"}, "steadyrl.x.c": {"steadyrl.x.a"}}
    assert layering.cycles(graph) == [["steadyrl.x.a", "steadyrl.x.b"]]


def test_no_private_name_is_imported_from_another_module():
    assert [f"{src}:{line} imports {name}" for src, name, line in _layering().private_imports()] == []
