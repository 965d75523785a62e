"""The PostgreSQL + pgvector store (psycopg 3, row-level security): see biomem.stores.pg.store."""

from .store import PostgresStore

__all__ = ["PostgresStore"]
