"""The ``gateway:`` section of config.yaml (validated by pydantic, like every other section)."""
from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator


def _http_url(value: str, example: str) -> str:
    if not value.startswith(("http://", "https://")):
        raise ValueError(f"must be an http(s) URL such as {example}")
    return value.rstrip("/")


class TelegramConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    base_url: str = Field("https://api.telegram.org", description="Bot API root (a loopback fake in tests)")
    token_env: str = Field("TELEGRAM_BOT_TOKEN", min_length=1, description="environment variable holding the token")
    allowed_chat_ids: list[int] = Field(default_factory=list, description="chats served; everyone else is refused")
    allowed_user_ids: list[int] = Field(
        default_factory=list, description="users who may talk to the agent and decide approvals in a served chat "
        "(empty: anyone in it)")
    poll_timeout_s: int = Field(25, ge=0, le=50, description="getUpdates long-poll seconds")
    send_attempts: int = Field(8, ge=1, le=100, description="tries per Bot API call before a send counts as failed")

    @field_validator("base_url")
    @classmethod
    def _http(cls, value: str) -> str:
        return _http_url(value, "https://api.telegram.org")


class MatrixConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    homeserver: str = Field("", description="client-server API root, e.g. https://matrix.example.org (empty: off)")
    user_id: str = Field("", description="the bot's Matrix id, @name:server")
    token_env: str = Field("MATRIX_ACCESS_TOKEN", min_length=1,
                           description="environment variable holding the bot's access token")
    allowed_room_ids: list[str] = Field(default_factory=list, description="rooms served (!id or !id:server)")
    allowed_user_ids: list[str] = Field(
        default_factory=list, description="users who may talk to the agent, invite the bot (it joins and serves "
        "that room) and decide approvals (empty: anyone in a served room; invitations are then declined)")
    poll_timeout_s: int = Field(25, ge=0, le=60, description="/sync long-poll seconds")
    send_attempts: int = Field(8, ge=1, le=100, description="tries per request on a rate limit or 5xx")
    max_event_bytes: int = Field(
        30000, ge=2000, le=60000, description="a message part's content size; the server's event limit is 65,536")

    @field_validator("homeserver")
    @classmethod
    def _http(cls, value: str) -> str:
        return _http_url(value, "https://matrix.example.org") if value else value

    @field_validator("user_id")
    @classmethod
    def _mxid(cls, value: str) -> str:
        if value and not (value.startswith("@") and ":" in value):
            raise ValueError("must be a Matrix user id such as @offload:example.org")
        return value

    @field_validator("allowed_room_ids")
    @classmethod
    def _rooms(cls, value: list[str]) -> list[str]:
        for room in value:
            if not room.startswith("!"):
                raise ValueError(f"{room!r} is not a room id; room ids start with ! (!abcdef:example.org, or "
                                 "without the server in newer room versions; Element: Room settings, Advanced)")
        return value

    @field_validator("allowed_user_ids")
    @classmethod
    def _users(cls, value: list[str]) -> list[str]:
        for user in value:
            if not (user.startswith("@") and ":" in user):
                raise ValueError(f"{user!r} is not a Matrix user id such as @alice:example.org")
        return value


class GatewayConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    telegram: TelegramConfig = Field(default_factory=TelegramConfig)
    matrix: MatrixConfig = Field(default_factory=MatrixConfig)
    live_roster: bool = Field(True, description="/agents edits one message in place until the work is done")
    roster_interval_s: float = Field(2.0, ge=0.2, le=60, description="seconds between roster edits")
    on_new_session: Literal["deliver", "drop"] = Field(
        "deliver", description="after /new: deliver the old session's results (labelled) or drop them")
    retry_backoff_s: float = Field(2.0, ge=0.05, le=600, description="first wait before resending a failed delivery")
