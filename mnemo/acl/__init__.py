"""Access control: scopes, grants and the permission check (README.md, "Sharing memories: scopes and grants")."""

from .policy import PERMISSIONS, Acl, home_scope, pattern_covers, scope_matches, validate_pattern

__all__ = ["PERMISSIONS", "Acl", "home_scope", "pattern_covers", "scope_matches", "validate_pattern"]
