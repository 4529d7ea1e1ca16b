"""A routine's text as a later version writes it again: the text an earlier version created it with,
edited, so that the SQL both versions share is written once."""


def edited(routine: str, replacements: list[tuple[str, str]]) -> str:
    """`routine` with each `old` of `replacements` replaced by its `new`, in turn. Every `old` must be
    there: an edit that finds nothing to replace is a mistake in this package, not a routine to install."""
    for old, new in replacements:
        if old not in routine:
            raise AssertionError(f"the routine has no {old!r}")  # (a mistake in this package)
        routine = routine.replace(old, new)
    return routine
