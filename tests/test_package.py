"""The package as a user installs it: its distribution name, the built wheel's contents and metadata, the
one version, install hints naming the right distribution, and the refusal to import on Windows."""

from __future__ import annotations

import email
import importlib
import importlib.metadata
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from helpers.procs import subprocess_env

import mnemo
from mnemo._install import install_hint

ROOT = Path(__file__).resolve().parents[1]
DIST = "mnemo-chain"
WINDOWS = (
    "Mnemo does not support Windows: its log needs POSIX advisory file locks (flock), which keep one writer "
    "at a time, and positional reads (os.pread), which let readers share the file without a lock. Use it on "
    "Linux or macOS (on Windows, inside WSL)."
)


# -- Windows: refused at once, saying why ------------------------------------------------------------------


def test_import_fails_at_once_on_windows(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "platform", "win32")
    for name in [m for m in sys.modules if m == "mnemo" or m.startswith("mnemo.")]:
        monkeypatch.delitem(sys.modules, name)  # restored, the same module objects, after the test
    with pytest.raises(ImportError) as info:
        importlib.import_module("mnemo")
    assert str(info.value) == WINDOWS
    # before anything else was imported: no fcntl-using module was reached
    assert not [m for m in sys.modules if m == "mnemo" or m.startswith("mnemo.")]


def test_the_command_fails_on_windows_with_the_same_message() -> None:
    code = "import runpy, sys; sys.platform = 'win32'; sys.argv = ['mnemo', '--version']; " \
           "runpy.run_module('mnemo', run_name='__main__')"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=subprocess_env(),
                            timeout=60)
    assert result.returncode == 1 and result.stdout == ""
    assert result.stderr.rstrip().endswith(f"ImportError: {WINDOWS}")


def test_import_works_here() -> None:
    assert sys.platform != "win32" and mnemo.MnemoClient.__name__ == "MnemoClient"


# -- one version, one distribution name ---------------------------------------------------------------------


def test_one_version() -> None:
    assert re.fullmatch(r"\d+\.\d+\.\d+", mnemo.__version__)
    assert importlib.metadata.version(DIST) == mnemo.__version__
    pyproject = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    assert 'dynamic = ["version"]' in pyproject and 'version = { attr = "mnemo._version.__version__" }' in pyproject
    project = pyproject.split("\n[project]\n", 1)[1].split("\n[", 1)[0]
    assert not re.search(r"(?m)^version\s*=", project), "a second, static version in pyproject.toml"


def _shipped_texts() -> list[Path]:
    files = [ROOT / "README.md", ROOT / "CHANGELOG.md", *sorted((ROOT / "docs").glob("*.md"))]
    files += sorted((ROOT / "mnemo").rglob("*.py")) + sorted((ROOT / "examples").glob("*.py"))
    return files


def _extras() -> set[str]:
    pyproject = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    section = pyproject.split("\n[project.optional-dependencies]\n", 1)[1].split("\n[", 1)[0]
    return set(re.findall(r"(?m)^([a-z][a-z-]*) = ", section))


def test_every_install_hint_works_while_the_distribution_is_unpublished() -> None:
    """`mnemo-chain` is not on PyPI: no text tells a newcomer to `pip install mnemo-chain...` as if it were
    (the name appears as what to use once published), and every hint installs a real extra from a
    checkout, in the one wording of mnemo._install."""
    hints = 0
    for path in _shipped_texts():
        text = path.read_text(encoding="utf-8")
        assert not re.search(r"pip install\W+mnemo-db", text), f"{path}: an install hint for mnemo-db"
        for found in re.finditer(r"pip install\W+mnemo-chain", text):
            before = text[max(0, found.start() - 80):found.start()]
            assert "once it is published" in before, f"{path}: {text[found.start():found.start() + 60]!r}"
        for extra in re.findall(r"pip install(?: -e)? '\.\[([a-z,-]+)\]'", text):
            hints += 1
            assert set(extra.split(",")) <= _extras(), f"{path}: no such extra {extra}"
    assert hints >= 8  # README, the examples, POSTGRES.md, and every ImportError and hint in the package
    for module in ("mnemo/tools/anthropic.py", "mnemo/tools/mcp/app.py", "mnemo/storage/postgres/__init__.py",
                   "mnemo/demo.py"):
        assert "install_hint(" in (ROOT / module).read_text(encoding="utf-8"), module
    assert install_hint("mcp") == \
        "pip install -e '.[mcp]' in a checkout of Mnemo (mnemo-chain[mcp] once it is published)"
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    install = readme.split("## Install\n", 1)[1].split("\n## ", 1)[0]
    assert "Mnemo is not on PyPI yet: install it from a checkout" in install
    assert "\npip install .  " in install and "\npip wheel --no-deps -w dist .  " in install
    assert "\npip install dist/mnemo_chain-*.whl  " in install
    assert "(once it is published: `pip install mnemo-chain`" in install
    assert "**Do not install it\nin an environment that holds `mnemo-db`**" in readme


def test_shipped_texts_cite_only_shipped_documents() -> None:
    cited = re.compile(r"DESIGN\.md|(?<![\w/])spec/[\w-]+\.(?:md|json)")
    owned_elsewhere = set((ROOT / "mnemo" / "storage").rglob("*.py")) | set((ROOT / "mnemo" / "tools").rglob("*.py"))
    for path in _shipped_texts():
        if path in owned_elsewhere or path.name == "API.md":  # API.md quotes those modules' docstrings
            continue
        found = cited.findall(path.read_text(encoding="utf-8"))
        assert not found, f"{path} cites {found}, which do not ship with the project"


# -- the built wheel ---------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> zipfile.ZipFile:
    try:
        setuptools_version = importlib.metadata.version("setuptools")
    except importlib.metadata.PackageNotFoundError:
        setuptools_version = "0"
    if int(setuptools_version.split(".")[0]) < 77:
        pytest.skip(f"building the wheel needs setuptools>=77 (the `test` extra), found {setuptools_version}")
    # built from a copy of what a source distribution holds, so that the checkout gets no build/ folder
    source = tmp_path_factory.mktemp("source")
    shutil.copytree(ROOT / "mnemo", source / "mnemo", ignore=shutil.ignore_patterns("__pycache__", "*.so"))
    for name in ("pyproject.toml", "setup.py", "README.md", "LICENSE"):
        shutil.copy(ROOT / name, source / name)
    out = tmp_path_factory.mktemp("wheel")
    result = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", str(source), "--no-deps", "--no-build-isolation", "-q", "-w", str(out)],
        capture_output=True, text=True, timeout=300,
    )
    assert result.returncode == 0, result.stderr
    (built,) = out.glob("*.whl")
    # the C extensions are compiled into it (mnemo/_speedups.c, _readpath.c, _writepath.c, _pgread.c): a wheel for this
    # interpreter and platform
    tag = f"cp{sys.version_info.major}{sys.version_info.minor}"
    assert built.name.startswith(f"mnemo_chain-{mnemo.__version__}-{tag}-{tag}-"), built.name
    return zipfile.ZipFile(built)


def _metadata(wheel: zipfile.ZipFile) -> email.message.Message:
    name = next(n for n in wheel.namelist() if n.endswith(".dist-info/METADATA"))
    return email.message_from_bytes(wheel.read(name))


def test_the_wheel_ships_the_package_typed_and_licensed(wheel: zipfile.ZipFile) -> None:
    names = set(wheel.namelist())
    info = f"mnemo_chain-{mnemo.__version__}.dist-info"
    assert "mnemo/py.typed" in names and wheel.read("mnemo/py.typed") == b""
    for extension in ("_speedups", "_readpath", "_writepath", "_pgread"):  # the scan core, the read and write paths
        assert any(n.startswith(f"mnemo/{extension}.") and n.endswith(".so") for n in names), extension
    assert wheel.read(f"{info}/licenses/LICENSE") == (ROOT / "LICENSE").read_bytes()
    shipped = {n for n in names if n.endswith(".py")}
    source = {str(p.relative_to(ROOT)) for p in (ROOT / "mnemo").rglob("*.py")}
    assert source <= shipped  # every module, the CLI's and salvage's included
    data = {str(p.relative_to(ROOT)) for p in (ROOT / "mnemo" / "ui").rglob("*")
            if p.suffix in (".html", ".css", ".js", ".svg")}
    assert data and data <= names  # mnemo ui's templates and static files
    assert not {n.split("/")[0] for n in names} - {"mnemo", info}  # no tests, benchmarks or tools
    entry_points = wheel.read(f"{info}/entry_points.txt").decode()
    assert "[console_scripts]\nmnemo = mnemo.cli:main" in entry_points


def test_the_wheel_metadata(wheel: zipfile.ZipFile) -> None:
    meta = _metadata(wheel)
    assert meta["Name"] == DIST and meta["Version"] == mnemo.__version__
    assert meta["License-Expression"] == "MIT" and meta["Requires-Python"] == ">=3.10"
    classifiers = set(meta.get_all("Classifier") or [])
    assert {"Operating System :: POSIX :: Linux", "Operating System :: MacOS", "Typing :: Typed",
            "Programming Language :: Python :: 3.10", "Programming Language :: Python :: 3.13"} <= classifiers
    assert not [c for c in classifiers if c.startswith(("License ::", "Operating System :: Microsoft"))]
    assert not meta.get_all("Project-URL")  # the project has no public address yet
    extras = set(meta.get_all("Provides-Extra") or [])
    assert {"anthropic-memory-tool", "postgres", "test", "dev", "bench", "ui"} <= extras
    requires = meta.get_all("Requires-Dist") or []

    def extra(name: str) -> set[str]:
        return {r.split(";")[0].strip() for r in requires if f'extra == "{name}"' in r}

    assert extra("postgres") == {"psycopg[binary]>=3.1"}
    assert extra("ui") == {"starlette>=0.40", "uvicorn>=0.30", "jinja2>=3.1"}
    assert "anthropic>=2.14" in extra("anthropic-memory-tool")
    test = {re.split(r"[<>=\[]", r)[0] for r in extra("test")}
    assert {"pytest", "hypothesis"} <= test and not test & {"ruff", "mypy", "msgpack-types"}
    assert {f"{DIST}[test]", f"{DIST}[bench]", "ruff>=0.6", "mypy>=1.10", "msgpack-types>=0.3"} <= extra("dev")
    assert extra("bench") == {"lmdb>=1.4", "anthropic>=2.14", "tantivy>=0.27"}  # the baselines of benchmarks/
    core = {r for r in requires if "extra ==" not in r}
    assert core == {"msgpack>=1.0.5", "cryptography>=41", "click>=8.1"}
