"""The ``gateway:`` section of config.yaml (validated by pydantic, like every other section)."""
from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator


class TelegramConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    base_url: str = Field("https://api.telegram.org", description="Bot API root (a loopback fake in tests)")
    token_env: str = Field("TELEGRAM_BOT_TOKEN", min_length=1, description="environment variable holding the token")
    allowed_chat_ids: list[int] = Field(default_factory=list, description="chats served; everyone else is refused")
    poll_timeout_s: int = Field(25, ge=0, le=50, description="getUpdates long-poll seconds")
    send_attempts: int = Field(8, ge=1, le=100, description="tries per Bot API call before a send counts as failed")

    @field_validator("base_url")
    @classmethod
    def _http(cls, value: str) -> str:
        if not value.startswith(("http://", "https://")):
            raise ValueError("must be an http(s) URL such as https://api.telegram.org")
        return value.rstrip("/")


class GatewayConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    telegram: TelegramConfig = Field(default_factory=TelegramConfig)
    live_roster: bool = Field(True, description="/agents edits one message in place until the work is done")
    roster_interval_s: float = Field(2.0, ge=0.2, le=60, description="seconds between roster edits")
    on_new_session: Literal["deliver", "drop"] = Field(
        "deliver", description="after /new: deliver the old session's results (labelled) or drop them")
    retry_backoff_s: float = Field(2.0, ge=0.05, le=600, description="first wait before resending a failed delivery")
