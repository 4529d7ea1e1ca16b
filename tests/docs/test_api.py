"""docs/API.md is what tools/gen_api_docs.py writes from the code now, so the reference cannot rot: change
a public signature or docstring and this fails until `python tools/gen_api_docs.py` is run."""

from __future__ import annotations

import importlib.util
import inspect
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest
from helpers.paths import ROOT
from helpers.procs import subprocess_env

import mnemo

pytest.importorskip("anthropic")  # mnemo.tools.anthropic is documented too

SCRIPT = ROOT / "tools" / "gen_api_docs.py"


def generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gen_api_docs", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_api_md_is_what_the_code_says() -> None:
    current = (ROOT / "docs" / "API.md").read_text(encoding="utf-8")
    assert current == generator().render(), "docs/API.md is out of date: run python tools/gen_api_docs.py"


def test_every_public_name_is_listed_with_its_signature_and_summary() -> None:
    text = (ROOT / "docs" / "API.md").read_text(encoding="utf-8")
    sections = {section.split("\n", 1)[0].strip("` "): section for section in text.split("\n## ")[1:]}
    assert list(sections) == ["mnemo", "mnemo.tools.server", "mnemo.tools.anthropic", "mnemo.audit", "mnemo.salvage",
                              "mnemo.transfer"]
    for name in mnemo.__all__:
        assert f"\n### `{name}`\n" in sections["mnemo"], name
    client = sections["mnemo"].split("### `MnemoClient`", 1)[1].split("\n### ", 1)[0]
    assert "class MnemoClient(db_path: str | os.PathLike[str], agent_id: str, *, durability: str = 'fsync'" in client
    for method in ("remember", "update", "forget", "forget_where", "query", "history", "transaction", "grant",
                   "revoke", "permissions", "verify", "export_audit", "compact", "stats", "close"):
        doc = inspect.getdoc(getattr(mnemo.MnemoClient, method))
        assert doc is not None
        summary = " ".join(doc.split("\n\n")[0].split())
        assert f"- `{method}(" in client and summary in client, method


def test_the_check_mode(tmp_path: Path) -> None:
    ok = subprocess.run([sys.executable, str(SCRIPT), "--check"], capture_output=True, text=True,
                        env=subprocess_env(), timeout=120)
    assert (ok.returncode, ok.stderr) == (0, "")
    gen = generator()
    stale = tmp_path / "API.md"
    stale.write_text(gen.render().replace("Store a new memory", "Store a memory"), encoding="utf-8")
    gen.API_MD = stale
    assert gen.main(["--check"]) == 1
    assert gen.main([]) == 0 and stale.read_text(encoding="utf-8") == gen.render()
