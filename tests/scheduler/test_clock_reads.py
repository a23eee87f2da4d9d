"""The engine reads the time only through its clock (scheduler/horizon.py).

A plan is kept while the clock has not reached its `stable_until`, which the clock notes as
the engine compares times with it. A comparison with the raw time would flip unnoticed and
leave a kept plan stale; so, in every module that `plan()` runs, the snapshot's time goes
nowhere but into the clock, and no comparison reads a `now`.
"""

from __future__ import annotations

import ast
from pathlib import Path

import gpuqueue.scheduler

PACKAGE = "gpuqueue.scheduler"
ROOT = Path(gpuqueue.scheduler.__file__).parent
CLOCK = "horizon"  # the one module that holds the time


def _imports(module: str) -> set[str]:
    """The modules of the package that `module` imports."""
    tree = ast.parse((ROOT / f"{module}.py").read_text())
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module is not None:
            if node.module == PACKAGE:
                found.update(alias.name for alias in node.names)
            elif node.module.startswith(PACKAGE + "."):
                found.add(node.module.removeprefix(PACKAGE + "."))
    return {name for name in found if (ROOT / f"{name}.py").exists()}


def planning_modules() -> list[str]:
    """engine.py and every module of the package it imports, directly or not."""
    seen: set[str] = set()
    todo = ["engine"]
    while todo:
        module = todo.pop()
        if module not in seen:
            seen.add(module)
            todo.extend(_imports(module))
    return sorted(seen)


def _is_time(node: ast.AST) -> bool:
    return (isinstance(node, ast.Name) and node.id == "now") or (
        isinstance(node, ast.Attribute) and node.attr in ("now", "_now")
    )


def time_reads(source: str) -> list[int]:
    """Lines that read a time's `now` (or the clock's `_now`) other than to make the clock."""
    lines = []
    tree = ast.parse(source)
    handed = set()  # `Horizon(snapshot.now)`: the time handed to the clock
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "Horizon":
            handed.update(id(arg) for arg in node.args)
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and node.attr in ("now", "_now")
            and isinstance(node.ctx, ast.Load)
            and id(node) not in handed
        ):
            lines.append(node.lineno)
    return lines


def time_comparisons(source: str) -> list[int]:
    """Lines with a comparison that reads a `now`, outside functions whose `now` is a
    parameter (a caller's time, which the engine, holding none, never gives)."""
    lines = []
    tree = ast.parse(source)
    skipped = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and any(
            arg.arg == "now" for arg in node.args.args + node.args.kwonlyargs
        ):
            skipped.update(id(inner) for inner in ast.walk(node))
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Compare)
            and id(node) not in skipped
            and any(_is_time(inner) for inner in ast.walk(node))
        ):
            lines.append(node.lineno)
    return lines


def test_the_modules_plan_runs_are_found() -> None:
    modules = planning_modules()
    for module in ("engine", "ordering", "preemption", "starvation", "reclaim_wait", CLOCK):
        assert module in modules
    assert "forecast" not in modules  # its own simulated time, stepped: not the plan's clock


def test_the_engine_hands_the_time_only_to_its_clock() -> None:
    found = {
        module: lines
        for module in planning_modules()
        if module != CLOCK and (lines := time_reads((ROOT / f"{module}.py").read_text()))
    }
    assert found == {}


def test_the_engine_compares_no_time_but_through_its_clock() -> None:
    found = {
        module: lines
        for module in planning_modules()
        if module != CLOCK and (lines := time_comparisons((ROOT / f"{module}.py").read_text()))
    }
    assert found == {}


def test_the_checks_find_a_bare_comparison() -> None:
    """What the two checks above would catch: a time kept aside and compared by hand."""
    source = """
class Search:
    def __init__(self, horizon, snapshot):
        self.clock = Horizon(snapshot.now)
        self.now = snapshot.now

    def protected(self, until):
        now = self.now
        return until > now or self.now - until < 5
"""
    assert time_reads(source) == [5, 8, 9]
    assert time_comparisons(source) == [9, 9]  # `until > now`, `... < 5`
