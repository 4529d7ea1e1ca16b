"""The tables of a Mnemo database in PostgreSQL, and what its application role may do with each."""

TABLES = (
    "mnemo_meta", "mnemo_head", "mnemo_entries", "mnemo_payloads", "mnemo_records", "mnemo_versions",
    "mnemo_tags", "mnemo_forgotten", "mnemo_tree", "mnemo_docs", "mnemo_terms", "mnemo_text_scopes",
    "mnemo_vectors", "mnemo_embedder", "mnemo_vectors_gone", "mnemo_vector_state",
)

# What the application role of a database may do (grant_application_role): append to the chain and
# erase payloads (by a forget: version 4's trigger refuses any other DELETE of them), keep the derived
# tables, and nothing else. It cannot update or delete an entry (no privilege, besides the trigger),
# disable a trigger or alter a table (it owns none).
APPLICATION_PRIVILEGES = {
    "mnemo_meta": "SELECT",
    "mnemo_head": "SELECT, UPDATE",
    "mnemo_entries": "SELECT, INSERT",
    "mnemo_payloads": "SELECT, INSERT, DELETE",
    "mnemo_records": "SELECT, INSERT, UPDATE, DELETE",
    "mnemo_versions": "SELECT, INSERT, DELETE",
    "mnemo_tags": "SELECT, INSERT, DELETE",
    "mnemo_forgotten": "SELECT, INSERT",
    "mnemo_tree": "SELECT, INSERT",
    "mnemo_docs": "SELECT, INSERT, DELETE",
    "mnemo_terms": "SELECT, INSERT, DELETE",
    "mnemo_text_scopes": "SELECT, INSERT, UPDATE, DELETE",
    "mnemo_vectors": "SELECT, INSERT, DELETE",
    "mnemo_embedder": "SELECT, INSERT, DELETE",
    "mnemo_vectors_gone": "SELECT, INSERT",
    "mnemo_vector_state": "SELECT, UPDATE",
    "mnemo_vector_stamps": "SELECT, UPDATE",
}
