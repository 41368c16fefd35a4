"""Request bodies of the moderation endpoints."""

from __future__ import annotations

from typing import Annotated, Literal, Self

from pydantic import Field, model_validator

from serve_app.schemas.common import Input, Uuid, text_between

NOTES_MAX = 2000
TARGETS = ("pattern", "question", "answer", "appeal")


class Decision(Input):
    """Exactly one of ``pattern_id``, ``question_id``, ``answer_id`` or
    ``appeal_id`` (an owner's appeal to reclaim an agent); an action; optional
    notes (shown to the author or appellant in the notification)."""

    pattern_id: Uuid | None = None
    question_id: Uuid | None = None
    answer_id: Uuid | None = None
    appeal_id: Uuid | None = None
    action: Literal["approve", "reject"]
    notes: Annotated[str, Field(max_length=NOTES_MAX * 2), text_between(1, NOTES_MAX)] | None = None

    @model_validator(mode="after")
    def _one_target(self) -> Self:
        named = [n for n in TARGETS if getattr(self, f"{n}_id")]
        if len(named) != 1:
            raise ValueError("send exactly one of pattern_id, question_id, answer_id, appeal_id")
        return self

    @property
    def target(self) -> tuple[str, object]:
        for kind in TARGETS:
            value = getattr(self, f"{kind}_id")
            if value is not None:
                return kind, value
        raise AssertionError("validated above")
