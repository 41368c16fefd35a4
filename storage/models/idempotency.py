"""Idempotency keys: the first answer to a creating request, kept for a while
so that a retry with the same ``Idempotency-Key`` gets it again."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import Column, DateTime, Index, LargeBinary, SmallInteger
from sqlmodel import Field, SQLModel

from storage.models.base import created_field


class IdempotencyKey(SQLModel, table=True):
    """One used key. Neither the key nor the caller is stored in clear: the row
    is found by a keyed hash of (caller, key), and the answer (which can carry
    a new API key or session token) is encrypted with a key derived from the
    client's own key, so the table alone gives nothing away."""

    __tablename__ = "idempotency_keys"
    __table_args__ = (Index("ix_idempotency_keys_expires", "expires_at"),)

    key_hash: bytes = Field(sa_column=Column(LargeBinary(32), primary_key=True))
    # SHA-256 of method, path and body: the same key with another request is refused.
    request_hash: bytes = Field(sa_column=Column(LargeBinary(32), nullable=False))
    status_code: int = Field(sa_column=Column(SmallInteger, nullable=False))
    # nonce + AES-GCM ciphertext of the answer's headers and body.
    response: bytes = Field(sa_column=Column(LargeBinary, nullable=False))
    created_at: datetime = created_field()
    expires_at: datetime = Field(sa_column=Column(DateTime(timezone=True), nullable=False))
