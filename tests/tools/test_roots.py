"""The memory tool's configured root, on both sides of each rule: the shortest roots are accepted and
serve files, a root that is not a string or not canonical is refused with its message (as InvalidInput
by the server, which then writes nothing)."""

from __future__ import annotations

from typing import Any

import pytest

from mnemo import MnemoClient
from mnemo.errors import InvalidInput
from mnemo.tools import MnemoMemoryToolServer
from mnemo.tools.paths import check_root


@pytest.mark.parametrize(("root", "canonical"), [("/a", "/a"), ("/a/", "/a"), ("/a/b", "/a/b"), ("/a/b//", "/a/b"),
                                                 ("/x.", "/x."), ("/.x/..y", "/.x/..y"), ("/\u00e9", "/\u00e9")])
def test_short_roots_are_canonical_and_serve_files(client: MnemoClient, root: str, canonical: str) -> None:
    assert check_root(root) == canonical
    server = MnemoMemoryToolServer(client, root=root)
    assert server.root == canonical
    created = server.execute({"command": "create", "path": canonical + "/n.md", "file_text": "hi"})
    assert not created.is_error, created.text
    viewed = server.execute({"command": "view", "path": canonical + "/n.md"})
    assert viewed.text.endswith("hi") and not viewed.is_error


@pytest.mark.parametrize(("root", "message"), [
    (5, "root must be a string"),
    (b"/memories", "root must be a string"),
    (None, "root must be a string"),
    ("/", "root must be an absolute path below /, got: '/'"),
    ("a/b", "root must be an absolute path below /, got: 'a/b'"),
    ("/.", "root must be canonical (no empty, '.' or '..' segments), got: '/.'"),
    ("/..", "root must be canonical (no empty, '.' or '..' segments), got: '/..'"),
    ("/a/./b", "root must be canonical (no empty, '.' or '..' segments), got: '/a/./b'"),
    ("//a", "root must be canonical (no empty, '.' or '..' segments), got: '//a'"),
    ("/a\\b", "root must not hold backslashes or percent-escapes, got: '/a\\\\b'"),
    ("/a%2F", "root must not hold backslashes or percent-escapes, got: '/a%2F'"),
    ("/a\u200b", "root must not hold control, format or separator characters, got: '/a\\u200b'"),
    ("/cafe\u0301", "root must be in Unicode normal form NFC, got: '/cafe\u0301'"),
])
def test_a_bad_root_is_refused_with_its_message(client: MnemoClient, root: Any, message: str) -> None:
    with pytest.raises(ValueError) as exc:
        check_root(root)
    assert str(exc.value) == message
    head = client.head
    with pytest.raises(InvalidInput) as refused:
        MnemoMemoryToolServer(client, root=root)
    assert str(refused.value) == message
    assert client.head == head
