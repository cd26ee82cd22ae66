"""The house rules, held by the tests: layers that only point down (import-linter's contracts in
pyproject.toml), no import cycle, no module over 400 lines, no two modules of one name, and ruff's lint
(line length, import order, unused and undefined names, bugbear, pyupgrade, complexity) over the whole tree."""

import os
import shutil
import subprocess
import sys

import grimp
import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
PACKAGES = ("attention_bench", "transformer", "benchmarks", "reports", "scripts")
BIN = os.path.dirname(sys.executable)
#: the most lines a module of the project may have (tests excluded)
MAX_LINES = 400


def lint_imports(cwd: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": cwd}
    return subprocess.run([os.path.join(BIN, "lint-imports"), "--no-cache"], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=120)


def test_every_layer_contract_is_kept():
    done = lint_imports(ROOT)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "0 broken" in done.stdout


def test_a_back_import_breaks_the_layers_contract(tmp_path):
    """The contract can fail: the same tree with the models importing the reports is refused, naming the import."""
    for name in PACKAGES:
        shutil.copytree(os.path.join(ROOT, name), tmp_path / name, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(os.path.join(ROOT, "pyproject.toml"), tmp_path)
    with open(tmp_path / "transformer" / "flops" / "tally.py", "a") as f:
        f.write("\nfrom reports import tidy  # noqa: E402, F401  (a back-import)\n")
    done = lint_imports(str(tmp_path))
    assert done.returncode != 0
    assert "BROKEN" in done.stdout and "transformer.flops.tally -> reports.tidy" in done.stdout, done.stdout


def test_no_module_imports_itself_back():
    graph = grimp.build_graph(*PACKAGES)
    cycles = [(m, back) for m in sorted(graph.modules) for back in graph.find_modules_directly_imported_by(m)
              if graph.chain_exists(importer=back, imported=m)]
    assert not cycles, cycles


def test_no_module_is_over_400_lines():
    long = {}
    for path in modules():
        with open(os.path.join(ROOT, path)) as fh:
            n = sum(1 for _ in fh)
        if n > MAX_LINES:
            long[path] = n
    assert not long, long


def modules() -> list[str]:
    """Every module of the project (tests excluded), as a path from the repository's root."""
    return [os.path.relpath(os.path.join(folder, f), ROOT) for name in PACKAGES
            for folder, _, files in os.walk(os.path.join(ROOT, name)) for f in files if f.endswith(".py")]


def test_no_two_modules_share_a_name():
    """A name says one thing: no module named like another in another package (``__init__`` aside)."""
    by_name: dict[str, list[str]] = {}
    for path in modules():
        if os.path.basename(path) != "__init__.py":
            by_name.setdefault(os.path.basename(path), []).append(path)
    assert not {n: paths for n, paths in by_name.items() if len(paths) > 1}


@pytest.mark.parametrize("check", [["check", "."]], ids=["lint"])
def test_ruff_passes_over_the_tree(check):
    done = subprocess.run([os.path.join(BIN, "ruff"), *check], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
