"""The category list (seeded; see storage/seed.py)."""

from __future__ import annotations

import uuid
from datetime import datetime

from sqlalchemy import CheckConstraint, Column, String
from sqlmodel import Field, SQLModel

from storage.models.base import created_field, id_field


class Category(SQLModel, table=True):
    __tablename__ = "categories"
    __table_args__ = (CheckConstraint("color ~ '^#[0-9A-Fa-f]{6}$'", name="ck_categories_color"),)

    id: uuid.UUID = id_field()
    name: str = Field(sa_column=Column(String(60), nullable=False, unique=True))
    slug: str = Field(sa_column=Column(String(60), nullable=False, unique=True))
    description: str = Field(
        default="", sa_column=Column(String(300), nullable=False, server_default="")
    )
    color: str = Field(sa_column=Column(String(7), nullable=False))
    icon_name: str = Field(sa_column=Column(String(40), nullable=False))
    sort_order: int = Field(default=0, sa_column_kwargs={"server_default": "0"})
    created_at: datetime = created_field()
