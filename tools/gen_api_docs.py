"""Write docs/API.md: every public name of Mnemo, with its signature and its docstring's first paragraph.

    python tools/gen_api_docs.py            # rewrite docs/API.md
    python tools/gen_api_docs.py --check    # exit 1 if docs/API.md differs from what the code says

The names are each module's `__all__` (for mnemo.audit, the list below). tests/docs/test_api.py runs the
check, so the reference cannot drift from the code. Needs the `anthropic-memory-tool` extra, for the SDK
adapters.
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
API_MD = ROOT / "docs" / "API.md"

# (module, names): None means the module's __all__.
MODULES: tuple[tuple[str, tuple[str, ...] | None], ...] = (
    ("mnemo", None),
    ("mnemo.tools.server", None),
    ("mnemo.tools.anthropic", None),
    ("mnemo.audit", (
        "verify_db", "verify_export", "export_audit", "read_log", "LogItem", "format_ts",
        "generate_keypair", "load_private_key", "load_public_key", "public_key_bytes", "sign_checkpoint",
        "UnreadableDatabase", "UnreadableExport", "KeyFileError",
    )),
    ("mnemo.salvage", None),
    ("mnemo.transfer", None),
)

HEADER = """\
# API reference

Every public name of Mnemo (the `mnemo-chain` distribution), with its signature and the first paragraph
of its docstring. This is the public API that docs/COMPATIBILITY.md keeps stable; anything not listed
here may change in any release. Generated from the code by `python tools/gen_api_docs.py`: do not edit
by hand (a test fails when this file and the code disagree).
"""


class _Text(str):
    """An annotation kept as the source text it was written as (no quotes around it)."""

    def __repr__(self) -> str:
        return str(self)


def first_paragraph(obj: Any) -> str:
    """The first paragraph of obj's own docstring (never one inherited from a base class), on one line."""
    doc = obj.__doc__ if isinstance(obj.__doc__, str) else None
    if not doc:
        return ""
    return " ".join(inspect.cleandoc(doc).split("\n\n")[0].split())


def signature(obj: Callable[..., Any], *, drop_return: bool = False, drop_self: bool = False) -> str | None:
    """obj's signature with annotations as written in the source, or None if it has none to show."""
    try:
        sig = inspect.signature(obj)
    except (TypeError, ValueError):
        return None
    if drop_self:
        sig = sig.replace(parameters=list(sig.parameters.values())[1:])

    def text(annotation: Any) -> Any:
        if annotation is inspect.Parameter.empty:
            return annotation
        return _Text(annotation if isinstance(annotation, str) else inspect.formatannotation(annotation))

    params = [p.replace(annotation=text(p.annotation)) for p in sig.parameters.values()]
    ret = inspect.Signature.empty if drop_return else text(sig.return_annotation)
    return str(sig.replace(parameters=params, return_annotation=ret))


def _members(cls: type) -> Iterator[tuple[str, str, str]]:
    """(name, signature line, doc) of the public methods and properties cls itself defines."""
    for name, raw in vars(cls).items():
        if name.startswith("_"):
            continue
        if isinstance(raw, property):
            yield name, f"{name}", first_paragraph(raw) or "(property)"
        elif isinstance(raw, (staticmethod, classmethod)):
            func = raw.__func__
            kind = "staticmethod" if isinstance(raw, staticmethod) else "classmethod"
            sig = signature(getattr(cls, name)) or "(...)"
            yield name, f"{name}{sig}  ({kind})", first_paragraph(func)
        elif inspect.isfunction(raw):
            sig = signature(raw, drop_self=True) or "(...)"
            yield name, f"{name}{sig}", first_paragraph(raw)


def _class(name: str, cls: type, public: set[int]) -> list[str]:
    """The constructor's signature in class notation (`class Name(params)`), then the bases: those of
    Mnemo that this reference lists (`public`: their ids), and any other but `object`. A base of Mnemo
    that no public module exports is how the class is built, not what it is (MnemoClient's ClientCore)."""
    is_exception = issubclass(cls, BaseException)
    own_init = any("__init__" in vars(k) for k in cls.__mro__ if k.__module__.startswith("mnemo"))
    sig = signature(cls, drop_return=True) if own_init or not is_exception else None
    lines = [f"### `{name}`", "", "```python", f"class {name}{sig or ''}", "```", ""]
    bases = [
        f"`{b.__name__}`" for b in cls.__bases__
        if b is not object and (id(b) in public or not b.__module__.startswith("mnemo"))
    ]
    if bases:
        lines += [f"Bases: {', '.join(bases)}.", ""]
    doc = first_paragraph(cls)
    if doc:
        lines += [doc, ""]
    members = list(_members(cls))
    for _member, line, member_doc in members:
        lines.append(f"- `{line}`" + (f"  \n  {member_doc}" if member_doc else ""))
    if members:
        lines.append("")
    return lines


def _function(name: str, func: Callable[..., Any]) -> list[str]:
    lines = [f"### `{name}`", "", "```python", f"def {name}{signature(func) or '(...)'}", "```", ""]
    doc = first_paragraph(func)
    return lines + ([doc, ""] if doc else [])


def _value(name: str, value: Any) -> list[str]:
    return [f"### `{name}`", "", "```python", f"{name} = {value!r}", "```", ""]


def _listed() -> Iterator[tuple[str, Any, list[str]]]:
    """(name, module, the names it documents) of each module of the reference, in order."""
    for module_name, chosen in MODULES:
        module = importlib.import_module(module_name)
        yield module_name, module, list(chosen if chosen is not None else module.__all__)


def render() -> str:
    out = [HEADER]
    documented: dict[int, str] = {}  # id of an object -> where it was documented first
    public = {id(getattr(module, name)) for _, module, names in _listed() for name in names}
    for module_name, module, names in _listed():
        out += [f"## `{module_name}`", ""]
        doc = first_paragraph(module)
        if doc:
            out += [doc, ""]
        for name in names:
            obj = getattr(module, name)
            qualified = f"{module_name}.{name}"
            first = documented.get(id(obj)) if inspect.isclass(obj) or inspect.isfunction(obj) else None
            if first is not None:
                out += [f"### `{name}`", "", f"The same object as `{first}`.", ""]
                continue
            documented[id(obj)] = qualified
            if inspect.isclass(obj):
                out += _class(name, obj, public)
            elif callable(obj):
                out += _function(name, obj)
            else:
                out += _value(name, obj)
    return "\n".join(out).rstrip("\n") + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--check", action="store_true", help="exit 1 if docs/API.md is out of date")
    args = parser.parse_args(argv)
    text = render()
    if args.check:
        current = API_MD.read_text(encoding="utf-8") if API_MD.exists() else ""
        if current != text:
            print(f"{API_MD} is out of date: run python tools/gen_api_docs.py", file=sys.stderr)
            return 1
        return 0
    API_MD.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
