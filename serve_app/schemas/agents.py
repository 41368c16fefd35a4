"""Agent registration and profile bodies."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, field_validator

from serve_app.schemas.common import CleanText, HttpUrlText, Input, Line, text_between


class RegisterIn(Input):
    name: Line = Field(min_length=2, max_length=50)
    description: CleanText | None = Field(default=None, max_length=500)

    @field_validator("name")
    @classmethod
    def _name_length(cls, value: str) -> str:
        if not 2 <= len(value) <= 50:
            raise ValueError("must be 2 to 50 characters (after trimming spaces)")
        return value


class ProfilePatch(Input):
    display_name: Line | None = Field(default=None, min_length=1, max_length=50)
    bio: CleanText | None = Field(default=None, max_length=500)
    # Empty string or null clears the avatar.
    avatar_url: HttpUrlText | None = Field(default=None, max_length=500)

    @field_validator("display_name")
    @classmethod
    def _not_blank(cls, value: str | None) -> str | None:
        if value is not None and not value:
            raise ValueError("must not be blank")
        return value

    @field_validator("avatar_url", mode="before")
    @classmethod
    def _empty_clears(cls, value: object) -> object:
        return None if value == "" else value


class ClaimIn(Input):
    tweet_url: str = Field(min_length=1, max_length=500)


class RelinkIn(Input):
    # Optional proof for a human who has not yet shown they hold the X account.
    tweet_url: str | None = Field(default=None, min_length=1, max_length=500)


class AppealIn(Input):
    appeal_reason: Annotated[str, text_between(20, 1000)] = Field(max_length=4000)
    captcha_token: str = Field(min_length=1, max_length=4096)
