"""``offload gateway``: wire config, runtime, tokens, store and every configured platform
(Telegram, Matrix) into ``GatewayApp``s served together by one process.

Telegram is served unless only Matrix is configured (``gateway.matrix.homeserver`` set and no
Telegram token and no Telegram chat allowed); Matrix is served when ``gateway.matrix.homeserver``
is set. Errors a user can fix (no token, no user id) are ``ConfigError``s naming the key or the
variable to set. An empty allow-list is the pairing start: the gateway serves no chat, tells each
chat that writes its id, and prints the command that allows it. Tokens are read from the
environment variables ``gateway.<platform>.token_env`` names and are never printed; SIGTERM and
Ctrl-C stop the gateway cleanly (unsettled results stay pending in the ledger for the next start).
"""
from __future__ import annotations

import logging
import os
import signal
import sys
import threading
from contextlib import ExitStack
from typing import TYPE_CHECKING, Any, Callable

from offload.config import ConfigError, OffloadConfig, load_config
from offload.session.conversation import Conversation
from offload.runtime import Offload

if TYPE_CHECKING:
    from offload.gateway.app import GatewayApp


def run_gateway(verbose: bool = False) -> int:
    logging.basicConfig(level=logging.INFO if verbose else logging.WARNING, stream=sys.stderr,
                        format="offload gateway: %(levelname)s: %(name)s: %(message)s")
    cfg = load_config()
    _tokens(cfg)  # fail before the runtime starts
    with Offload(cfg) as off:
        off.build_agent("sess_check")  # fail now on a bad model config, not on the first message
        return _serve(off, cfg)


def _serves_telegram(cfg: OffloadConfig) -> bool:
    tg, mx = cfg.gateway.telegram, cfg.gateway.matrix
    return not mx.homeserver or bool(os.environ.get(tg.token_env, "").strip()) or bool(tg.allowed_chat_ids)


def _tokens(cfg: OffloadConfig) -> dict[str, str]:
    tg, mx = cfg.gateway.telegram, cfg.gateway.matrix
    tokens = {}
    if _serves_telegram(cfg):
        tokens["telegram"] = os.environ.get(tg.token_env, "").strip()
        if not tokens["telegram"]:
            raise ConfigError(f"no Telegram bot token: export {tg.token_env}=<token from @BotFather> "
                              "(or name another variable with `offload config set gateway.telegram.token_env NAME`)")
    if mx.homeserver:
        if not mx.user_id:
            raise ConfigError("gateway.matrix.homeserver is set but not the bot's id: "
                              "offload config set gateway.matrix.user_id @yourbot:your.server")
        tokens["matrix"] = os.environ.get(mx.token_env, "").strip()
        if not tokens["matrix"]:
            raise ConfigError(f"no Matrix access token: export {mx.token_env}=<the bot's access token> (docs/gateway.md "
                              "shows how to get one; or name another variable with `offload config set "
                              "gateway.matrix.token_env NAME`)")
    return tokens


def _serve(off: Offload, cfg: OffloadConfig) -> int:
    from offload.gateway.app import serve_all
    from offload.gateway.state import GatewayStateError

    store = off.session_store()
    stop = threading.Event()

    def build(session_id: str, key: str) -> Conversation:
        return Conversation(off.build_agent(session_id), store, session_key=key)

    fatal: tuple[type[BaseException], ...] = (GatewayStateError,)
    with ExitStack() as closing:
        apps = []
        for name, token in _tokens(cfg).items():
            app, errors = (_telegram if name == "telegram" else _matrix)(off, cfg, token, build, store, stop, closing)
            apps.append(app)
            fatal += errors
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, lambda *_: stop.set())
        from offload.owner import handover

        handover.on_termination(off)  # SIGTERM, SIGHUP: the running subagents go on in the home's worker, then stop
        restored = off.bus.restore_completions()
        print(f"offload gateway: restored {restored} undelivered result(s) from the ledger", flush=True)
        try:
            serve_all(apps, stop)
        except fatal as exc:
            raise ConfigError(str(exc)) from None
    print("offload gateway: stopped; undelivered results stay pending for the next start", flush=True)
    return 0


def _telegram(off: Offload, cfg: OffloadConfig, token: str, build: Callable[..., Conversation],
              store: Any, stop: threading.Event, closing: ExitStack) -> tuple[GatewayApp, tuple[type[BaseException], ...]]:
    from offload.gateway.access import Access
    from offload.gateway.app import GatewayApp
    from offload.gateway.state import GatewayState
    from offload.gateway.telegram.adapter import TelegramPlatform
    from offload.gateway.telegram.client import TelegramAuthError, TelegramClient

    tg = cfg.gateway.telegram
    client = TelegramClient(tg.base_url, token, max_attempts=tg.send_attempts, stop=stop)
    closing.callback(client.close)
    state = GatewayState("telegram")
    access = Access("telegram", {str(c) for c in tg.allowed_chat_ids}, "gateway.telegram.allowed_chat_ids",
                    {str(u) for u in tg.allowed_user_ids}, "gateway.telegram.allowed_user_ids", numeric=True)
    app = GatewayApp(off, TelegramPlatform(client, state), cfg.gateway, access, build, store, state,
                     stop, tg.poll_timeout_s)
    if tg.allowed_chat_ids:
        print(f"offload gateway: serving {len(tg.allowed_chat_ids)} allowed Telegram chat(s) via {tg.base_url}; "
              "Ctrl-C stops", flush=True)
    else:
        print("offload gateway: no chat is allowed yet, so none is served; write to the bot from your chat: it "
              "answers with the chat's id, and this console prints the command that allows it. Ctrl-C stops",
              flush=True)
    return app, (TelegramAuthError,)


def _matrix(off: Offload, cfg: OffloadConfig, token: str, build: Callable[..., Conversation],
            store: Any, stop: threading.Event, closing: ExitStack) -> tuple[GatewayApp, tuple[type[BaseException], ...]]:
    try:
        from offload.gateway.matrix.adapter import MatrixPlatform
        from offload.gateway.matrix.client import MatrixAuthError, MatrixClient
    except ImportError as exc:
        raise ConfigError(f"gateway.matrix is configured but its client library is missing ({exc}): "
                          "pip install 'offload[matrix]'") from None
    from offload.gateway.access import Access
    from offload.gateway.app import GatewayApp
    from offload.gateway.matrix.ids import decode, encode
    from offload.gateway.state import GatewayState

    mx = cfg.gateway.matrix
    client = MatrixClient(mx.homeserver, mx.user_id, token, max_attempts=mx.send_attempts, stop=stop)
    closing.callback(client.close)
    state = GatewayState("matrix")
    platform = MatrixPlatform(client, state, set(mx.allowed_user_ids), mx.max_event_bytes)
    access = Access("matrix", {encode(r) for r in mx.allowed_room_ids}, "gateway.matrix.allowed_room_ids",
                    set(mx.allowed_user_ids), "gateway.matrix.allowed_user_ids",
                    extra_chats=platform.joined_rooms, shown=decode)
    app = GatewayApp(off, platform, cfg.gateway, access, build, store, state, stop, mx.poll_timeout_s)
    print(f"offload gateway: serving Matrix as {mx.user_id} via {mx.homeserver}: {len(mx.allowed_room_ids)} "
          f"allowed room(s), invitations accepted from {len(mx.allowed_user_ids)} user(s); Ctrl-C stops", flush=True)
    errors: tuple[type[BaseException], ...] = (MatrixAuthError,)
    return app, errors

