"""The search indexes each Api process holds a copy of (the BM25 index and
the vector index), kept in step with Postgres through its change log."""
