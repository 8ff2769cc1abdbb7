"""``offload gateway``: wire config, runtime, token, store and the Telegram platform into a
``GatewayApp``.

Errors a user can fix (no token) are ``ConfigError``s naming the key or the variable to set. An
empty allow-list is the pairing start: the gateway serves no chat, tells each chat that writes
its id, and prints the command that allows it. The token is read from the environment variable
``gateway.telegram.token_env`` names and is never printed; SIGTERM and Ctrl-C stop the gateway
cleanly (unsettled results stay pending in the ledger for the next start).
"""
from __future__ import annotations

import logging
import os
import signal
import sys
import threading

from offload.config import ConfigError, OffloadConfig, load_config
from offload.conversation import Conversation
from offload.runtime import Offload


def run_gateway(verbose: bool = False) -> int:
    logging.basicConfig(level=logging.INFO if verbose else logging.WARNING, stream=sys.stderr,
                        format="offload gateway: %(levelname)s: %(name)s: %(message)s")
    cfg = load_config()
    tg = cfg.gateway.telegram
    token = os.environ.get(tg.token_env, "").strip()
    if not token:
        raise ConfigError(f"no Telegram bot token: export {tg.token_env}=<token from @BotFather> "
                          "(or name another variable with `offload config set gateway.telegram.token_env NAME`)")
    with Offload(cfg) as off:
        off.build_agent("sess_check")  # fail now on a bad model config, not on the first message
        return _serve(off, cfg)


def _serve(off: Offload, cfg: OffloadConfig) -> int:
    from offload.gateway.app import GatewayApp
    from offload.gateway.state import GatewayState, GatewayStateError
    from offload.gateway.telegram.adapter import TelegramPlatform
    from offload.gateway.telegram.client import TelegramAuthError, TelegramClient

    tg = cfg.gateway.telegram
    token = os.environ.get(tg.token_env, "").strip()
    store = off.session_store()
    stop = threading.Event()
    client = TelegramClient(tg.base_url, token, max_attempts=tg.send_attempts, stop=stop)
    state = GatewayState("telegram")

    def build(session_id: str, key: str) -> Conversation:
        return Conversation(off.build_agent(session_id), store, session_key=key)

    app = GatewayApp(off, TelegramPlatform(client, state), cfg.gateway, {str(c) for c in tg.allowed_chat_ids},
                     build, store, state, stop)
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    restored = off.bus.restore_completions()
    print(f"offload gateway: restored {restored} undelivered result(s) from the ledger", flush=True)
    if tg.allowed_chat_ids:
        print(f"offload gateway: serving {len(tg.allowed_chat_ids)} allowed Telegram chat(s) via {tg.base_url}; "
              "Ctrl-C stops", flush=True)
    else:
        print("offload gateway: no chat is allowed yet, so none is served; write to the bot from your chat: it "
              "answers with the chat's id, and this console prints the command that allows it. Ctrl-C stops",
              flush=True)
    try:
        app.run()
    except (TelegramAuthError, GatewayStateError) as exc:
        raise ConfigError(str(exc)) from None
    finally:
        client.close()
    print("offload gateway: stopped; undelivered results stay pending for the next start", flush=True)
    return 0
