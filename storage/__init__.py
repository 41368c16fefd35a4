"""The durable store: tables, all SQL (repositories), engine, migrations, embedded Postgres."""
