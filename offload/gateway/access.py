"""Who a platform's gateway serves: the allow-lists of chats and of users, and what to say to
everyone else.

The gateway core used to hold a set of chat ids and Telegram's wording; with a second platform
each platform brings an ``Access``: which chats it serves (Matrix adds rooms an allowed user
invited the bot to), which users may drive the agent and decide approvals (empty: anyone in a
served chat, as Telegram always did), and the refusal and pairing texts naming ITS config keys.
Invariant: ``serves(message)`` is the one test the app, the delivery watcher and approvals
apply; the refusal a stranger gets names only their own chat (or user) id, never a served one.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Callable, Iterable


@dataclass
class Access:
    """``chats``: allowed chat ids (as the Route carries them); ``users``: allowed user ids (empty:
    anyone in a served chat); ``chat_key``/``user_key``: the config keys that hold them;
    ``numeric``: ids are numbers in config (Telegram), else JSON strings (Matrix);
    ``extra_chats``: chats served beyond the list (Matrix: rooms an allowed user invited us to);
    ``shown``: how an id is shown to a person (Matrix decodes the session-key escape)."""

    platform: str
    chats: set[str]
    chat_key: str
    users: set[str] = field(default_factory=set)
    user_key: str = ""
    numeric: bool = False
    extra_chats: Callable[[], Iterable[str]] = lambda: ()
    shown: Callable[[str], str] = lambda chat_id: chat_id

    def serves_chat(self, chat_id: str) -> bool:
        return chat_id in self.chats or chat_id in set(self.extra_chats())

    def serves_user(self, user_id: str) -> bool:
        return not self.users or user_id in self.users

    def refusal(self, chat_id: str) -> str:
        chat = self.shown(chat_id)
        return (f"This bot does not serve this chat. Its chat id is {chat}: the bot's owner can allow it with "
                f"`offload config set {self.chat_key} '{self._list([chat], self.numeric)}'` "
                "(next to the ids already there), then restart offload gateway.")

    def pairing(self, chat_id: str) -> str:
        ids = [*sorted((self.shown(c) for c in self.chats), key=_numeric), self.shown(chat_id)]
        return (f"offload gateway: chat {self.shown(chat_id)} wrote, but it is not allowed; to serve it run: offload "
                f"config set {self.chat_key} '{self._list(ids, self.numeric)}' and restart the gateway")

    def user_refusal(self, user_id: str) -> str:
        return (f"This bot answers only the users its owner allowed, and {user_id} is not one of them: the owner "
                f"can add it to {self.user_key}, then restart offload gateway.")

    @staticmethod
    def _list(ids: list[str], numeric: bool) -> str:
        return f"[{', '.join(ids)}]" if numeric else json.dumps(ids)


def _numeric(chat_id: str) -> tuple[int, str]:
    try:
        return int(chat_id), ""
    except ValueError:
        return 0, chat_id
