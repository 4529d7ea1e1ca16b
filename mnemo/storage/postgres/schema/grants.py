"""The privileges a version gives on the tables it adds: to each role that may insert into a table of an
earlier version (grant_application_role's, and any other the owner gave as much), so that a role that
kept the derived tables before a migration keeps them after it."""


def grant_to_writers_of(table: str, *grants: str) -> str:
    """The SQL that runs `GRANT <grant> TO <role>` for each of `grants` ("SELECT, INSERT ON mnemo_x") and
    each role other than the owner that holds INSERT on `table` (a name of this package's, never a
    caller's: it is written into the SQL as it is)."""
    executes = "".join(f"        EXECUTE 'GRANT {grant} TO ' || grantee;\n" for grant in grants)
    return f"""DO $$
DECLARE
    grantee text;
BEGIN
    FOR grantee IN
        SELECT DISTINCT CASE WHEN a.grantee = 0 THEN 'PUBLIC' ELSE a.grantee::regrole::text END  -- quoted as needed
        FROM pg_class c CROSS JOIN LATERAL aclexplode(c.relacl) a
        WHERE c.oid = '{table}'::regclass AND a.privilege_type = 'INSERT' AND a.grantee <> c.relowner
    LOOP
{executes}    END LOOP;
END;
$$;
"""
