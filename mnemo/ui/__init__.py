"""`mnemo ui`: see what an agent remembers, who changed what, and whether the chain verifies, in a browser.

```python
from mnemo import MnemoClient
from mnemo.ui import create_app, serve

with MnemoClient("memory.mnemo.db", "claude") as client:
    serve(client)              # what `mnemo ui` runs: prints http://127.0.0.1:PORT/u/<32 hex>/?token=...
```

`create_app` gives the Starlette app (for tests, or to serve another way); docs/UI.md says what each
page shows and how the UI is kept to its user (secret path, token, session cookie, CSRF, Origin,
loopback). Needs the `ui` extra (starlette, uvicorn, jinja2).
"""

from __future__ import annotations

try:
    import jinja2  # noqa: F401 - checked here so that the hint names the extra
    import starlette  # noqa: F401
    import uvicorn  # noqa: F401
except ImportError as _exc:  # pragma: no cover - exercised only without the extra
    from mnemo._install import install_hint

    raise ImportError(f"mnemo ui needs starlette, uvicorn and jinja2; install them with: {install_hint('ui')}") \
        from _exc

from mnemo.ui.app import create_app
from mnemo.ui.security import Guard
from mnemo.ui.serve import serve

__all__ = ["Guard", "create_app", "serve"]
