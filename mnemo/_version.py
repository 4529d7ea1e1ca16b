"""The one source of Mnemo's version: packaging reads it (pyproject.toml), `mnemo --version` prints it,
and the modules that stamp it on what they make (exports, the MCP server's handshake) import it from here,
never from the package's root, which imports them."""

__version__ = "0.1.0"
