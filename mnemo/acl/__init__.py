"""Access control: names, scopes, grants and the permission check (README.md, "Sharing memories")."""

from .names import (
    MAX_AGENT_ID_CHARS,
    MAX_NAME_CHARS,
    check_agent_id,
    check_name,
    check_pattern,
    home_scope,
    is_pattern,
)
from .policy import PERMISSIONS, Acl, pattern_covers, scope_matches, validate_pattern

__all__ = [
    "MAX_AGENT_ID_CHARS",
    "MAX_NAME_CHARS",
    "PERMISSIONS",
    "Acl",
    "check_agent_id",
    "check_name",
    "check_pattern",
    "home_scope",
    "is_pattern",
    "pattern_covers",
    "scope_matches",
    "validate_pattern",
]
