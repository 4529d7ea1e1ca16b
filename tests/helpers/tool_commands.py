"""Hypothesis strategies of memory-tool commands, for the property tests that run random sequences."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st


def commands(paths: st.SearchStrategy[str], text: st.SearchStrategy[str], *, view: bool = True
             ) -> st.SearchStrategy[dict[str, Any]]:
    """create, str_replace, insert, rename and delete (and view, unless told not to) over `paths`."""
    writes = [
        st.builds(lambda p, t: {"command": "create", "path": p, "file_text": t}, paths, text),
        st.builds(lambda p, o, n: {"command": "str_replace", "path": p, "old_str": o, "new_str": n},
                  paths, st.sampled_from(["a", "b", "é"]), text),
        st.builds(lambda p, t: {"command": "insert", "path": p, "insert_line": 0, "insert_text": t}, paths, text),
        st.builds(lambda o, n: {"command": "rename", "old_path": o, "new_path": n}, paths, paths),
        st.builds(lambda p: {"command": "delete", "path": p}, paths),
    ]
    if view:
        writes.append(st.builds(lambda p: {"command": "view", "path": p}, paths))
    return st.one_of(writes)
