"""Tuned embedding models (``cairn tune``, issue 50): each version's files as
one archive in chunks, so that every node with the database can load it, and
the log of which model search used when (``cairn models rollback``)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import (
    BigInteger,
    Boolean,
    CheckConstraint,
    Column,
    ForeignKey,
    Identity,
    Integer,
    LargeBinary,
    String,
)
from sqlmodel import Field, SQLModel

from storage.models.base import created_field, jsonb_field


class ModelVersion(SQLModel, table=True):
    """A tuned model: its name is what ``embeddings.model`` and
    ``search_model`` hold; its files are a tar archive in ``model_chunks``
    (``complete`` once every chunk is in), its card what the gate measured."""

    __tablename__ = "model_versions"

    name: str = Field(sa_column=Column(String(200), primary_key=True))
    base: str = Field(sa_column=Column(String(200), nullable=False))
    # SHA-256 of the archive: what a node checks after reading it, and the
    # key of its local copy (and so of its ONNX export).
    sha256: str = Field(sa_column=Column(String(64), nullable=False))
    size: int = Field(sa_column=Column(BigInteger, nullable=False))
    chunks: int = Field(sa_column=Column(Integer, nullable=False))
    complete: bool = Field(
        default=False, sa_column=Column(Boolean, nullable=False, server_default="false")
    )
    accepted: bool = Field(
        default=False, sa_column=Column(Boolean, nullable=False, server_default="false")
    )
    card: dict[str, Any] = jsonb_field()
    created_at: datetime = created_field()


class ModelChunk(SQLModel, table=True):
    """``seq`` 0, 1, … of a version's archive (as ``upload_chunks``:
    docs/decisions/storage.md, "Uploads in Postgres")."""

    __tablename__ = "model_chunks"
    __table_args__ = (CheckConstraint("seq >= 0", name="ck_model_chunks_seq"),)

    name: str = Field(
        sa_column=Column(
            String(200),
            ForeignKey("model_versions.name", ondelete="CASCADE"),
            primary_key=True,
        )
    )
    seq: int = Field(sa_column=Column(Integer, primary_key=True, autoincrement=False))
    data: bytes = Field(sa_column=Column(LargeBinary, nullable=False))


class ModelActivation(SQLModel, table=True):
    """Each switch of the model search uses, oldest first (written with
    ``search_model``): ``cairn models rollback`` goes back one."""

    __tablename__ = "model_activations"

    id: int | None = Field(
        default=None, sa_column=Column(BigInteger, Identity(always=False), primary_key=True)
    )
    model: str = Field(sa_column=Column(String(200), nullable=False))
    activated_at: datetime = created_field()
