"""``GatewayApp``: serves every allowed chat of one platform until stopped; ``serve_all`` runs
the apps of every configured platform (Telegram, Matrix) in one process.

What the seam lacked with one platform, and has now: the app polled with Telegram's settings
(each app gets its platform's poll timeout), held one set of chat ids and named Telegram's
config keys to strangers (each platform brings an ``Access``: chats, users, its own texts), and
one ``run`` owned the process (``start`` per app, one ``serve_all`` waits on them all).

The poll loop reads incoming messages, refuses chats not on the allow-list (once per chat,
remembered in the gateway state, and nothing runs for them; the refusal tells the chat its id,
and the console prints the command that allows it — how a new owner pairs their chat, also
with an empty allow-list), answers chat commands at once
(/agents, /stop, /new, /help) and queues anything else as a user turn of that chat's
``ChatSession``. A watcher thread delivers background results (see ``offload/gateway/watcher.py``),
another shows subagents' approval requests with buttons (``offload/gateway/approvals.py``).

Invariant: one ``ChatSession`` per session key per process, and that chat's session id lives
in the gateway state, so after a restart a chat continues the same stored session and its
results still route to it. A user not on a non-empty user allow-list gets one notice per
chat and nothing runs for them.
"""
from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING, Callable

from offload.agent.session_store import SessionStore, new_session_id
from offload.gateway.access import Access
from offload.gateway.approvals import GatewayApprovals
from offload.gateway.chat_session import ChatSession
from offload.gateway.config import GatewayConfig
from offload.gateway.platform import Incoming, Platform, Route, SendFailed, session_key
from offload.gateway.roster import RosterBubble, roster_text
from offload.gateway.state import GatewayState
from offload.gateway.watcher import DeliveryWatcher

if TYPE_CHECKING:  # the app builds conversations through ``build``; it never imports the CLI layer
    from offload.session.conversation import Conversation
    from offload.runtime import Offload

logger = logging.getLogger(__name__)

HELP = ("I run an agent for this chat. Ask anything; background work reports back here.\n"
        "/agents live roster of this chat's background agents\n/stop stop this chat's background agents\n"
        "/new start a new session\n/help this text")

BuildConversation = Callable[[str, str], "Conversation"]  # (session id, session key) -> Conversation


class GatewayApp:
    def __init__(self, runtime: Offload, platform: Platform, cfg: GatewayConfig, access: Access | set[str],
                 build: BuildConversation, store: SessionStore, state: GatewayState,
                 stop: threading.Event | None = None, poll_timeout_s: float | None = None) -> None:
        self.runtime = runtime
        if not isinstance(access, Access):  # a bare set of chat ids: Telegram's allow-list
            access = Access(platform.name, set(access), f"gateway.{platform.name}.allowed_chat_ids", numeric=True)
        self.platform, self.cfg, self.access, self.build = platform, cfg, access, build
        self.poll_timeout_s = cfg.telegram.poll_timeout_s if poll_timeout_s is None else poll_timeout_s
        self.store, self.state = store, state
        self.stop = stop or threading.Event()
        self.on_unknown_chat: Callable[[str], None] = lambda line: print(line, flush=True)  # the owner's console
        self._told_owner: set[str] = set()
        self.chats: dict[str, ChatSession] = {}
        self._chats_lock = threading.Lock()
        self.watcher = DeliveryWatcher(platform.name, runtime.bus, runtime.deliveries, self.chat_for,
                                       consumer=f"gateway-{platform.name}", backoff_s=cfg.retry_backoff_s,
                                       allowed=access.serves_chat, allowed_key=access.chat_key)
        self.approvals = GatewayApprovals(platform, runtime.ledger, state, access.serves_chat, access.serves_user)

    def chat_for(self, key: str, route: Route, chat_type: str) -> ChatSession:
        with self._chats_lock:
            chat = self.chats.get(key)
            if chat is None:
                chat = self.chats[key] = ChatSession(
                    key, route, chat_type, self.platform, self._open_conversation,
                    lambda batch, outcome, key=key: self.watcher.batch_done(key, batch, outcome),
                    self.cfg.on_new_session)
            return chat

    def _open_conversation(self, key: str, fresh: bool) -> Conversation:
        def pick(data: dict) -> str:
            sessions = data.setdefault("sessions", {})
            if fresh or not sessions.get(key):
                sessions[key] = new_session_id()
            else:  # context compression continues a session under a new id: follow it
                sessions[key] = self.store.live_tip(sessions[key]) or sessions[key]
            return sessions[key]
        session_id = self.state.update(pick)
        if not self.store.session_exists(session_id):
            self.store.create_session(session_id)
        return self.build(session_id, key)

    def run(self) -> None:
        """Serve until ``stop`` is set (``serve_all`` with this platform alone)."""
        serve_all([self], self.stop)

    def start(self, failure: list[BaseException]) -> threading.Thread:
        """Start this platform's threads (polling runs on a daemon thread so a stop never waits
        out a long poll); a fatal polling error (bad token, corrupt state) lands in ``failure``
        and sets ``stop``. Returns the watcher thread, the one to join on the way out."""
        name = self.platform.name
        watcher = threading.Thread(target=self.watcher.run, args=(self.stop,), name=f"gateway-watcher-{name}", daemon=True)
        poller = threading.Thread(target=self._poll_loop, args=(failure,), name=f"gateway-poll-{name}", daemon=True)
        asker = threading.Thread(target=self.approvals.run, args=(self.stop,), name=f"gateway-approvals-{name}", daemon=True)
        for thread in (watcher, poller, asker):
            thread.start()
        return watcher

    def _poll_loop(self, failure: list[BaseException]) -> None:
        while not self.stop.is_set():
            try:
                self.platform.poll(self.poll_timeout_s, self.handle)
            except SendFailed as exc:
                logger.warning("polling %s failed: %s; polling again", self.platform.name, exc)
            except BaseException as exc:
                failure.append(exc)
                self.stop.set()

    def handle(self, message: Incoming) -> None:
        if not self.access.serves_chat(message.route.chat_id):
            self._refuse(message.route)
            return
        if message.button:  # a press of an Approve / Deny button: approvals checks who may decide
            self.approvals.on_press(message)
            return
        if not self.access.serves_user(message.user_id):
            self._refuse_user(message)
            return
        key = session_key(self.platform.name, message)
        chat = self.chat_for(key, message.route, message.chat_type)
        command = message.text.strip().split("@")[0].split()[0] if message.text.strip().startswith("/") else ""
        if command == "/help" or command == "/start":
            chat.say(HELP)
        elif command == "/agents":
            self._agents(chat)
        elif command == "/stop":
            reason = "stopped from the chat (/stop)"
            stopped = self.runtime.engine.interrupt_session(session_key=key, reason=reason)
            stopped += self.runtime.admission.cancel(lambda row: row.origin_session == key, reason)  # never start
            chat.say(f"stopping {stopped} background delegation(s) of this chat; their partial results will arrive here")
        elif command == "/new":
            chat.new_session()
        elif command:
            chat.say(f"unknown command {command}.\n{HELP}")
        else:
            chat.submit_user(message)

    def _agents(self, chat: ChatSession) -> None:
        def units() -> list[dict]:
            queued = self.runtime.admission.items()  # first: a unit leaves it only once on the engine's roster
            live = [i for i in self.runtime.engine.list() if i.get("session_key") == chat.key]
            listed = {i.get("delegation_id") for i in live}
            return live + [i for i in queued if i.get("session_key") == chat.key and i["delegation_id"] not in listed]
        if not self.cfg.live_roster:
            chat.say(roster_text(units()), header="Background agents")
            return
        try:
            RosterBubble(self.platform, chat.route, units, self.cfg.roster_interval_s, self.stop).start()
        except Exception as exc:
            logger.warning("roster for chat %s failed: %s", chat.route.chat_id, exc)

    def _refuse(self, route: Route) -> None:
        if route.chat_id not in self._told_owner:  # once per chat and run: what to type to allow it
            self._told_owner.add(route.chat_id)
            self.on_unknown_chat(self.access.pairing(route.chat_id))
        if self._first_refusal(route.chat_id):
            logger.warning("refused chat %s: not in %s", route.chat_id, self.access.chat_key)
            self._send_refusal(route, self.access.refusal(route.chat_id))

    def _refuse_user(self, message: Incoming) -> None:
        """A served chat, a user not on the user allow-list: one notice per user and chat."""
        if self._first_refusal(f"{message.route.chat_id} {message.user_id}"):
            logger.warning("refused user %s in chat %s: not in %s", message.user_id, message.route.chat_id,
                           self.access.user_key)
            self._send_refusal(message.route, self.access.user_refusal(message.user_id))

    def _first_refusal(self, who: str) -> bool:
        def first_time(data: dict) -> bool:
            refused = data.setdefault("refused", [])
            if who in refused:
                return False
            refused.append(who)
            return True
        return bool(self.state.update(first_time))

    def _send_refusal(self, route: Route, text: str) -> None:
        try:
            self.platform.send(route, text)
        except Exception as exc:
            logger.warning("refusal to chat %s not sent: %s", route.chat_id, exc)


def serve_all(apps: list[GatewayApp], stop: threading.Event) -> None:
    """Serve every platform of one process until ``stop`` is set; a fatal error of any platform
    stops them all and is raised here."""
    failure: list[BaseException] = []
    watchers = [app.start(failure) for app in apps]
    # A timed wait, not stop.wait(): a signal delivered to another thread does not interrupt
    # the main thread's untimed lock wait, so the SIGTERM handler would never get to run.
    while not stop.wait(0.5):
        pass
    for watcher in watchers:
        watcher.join(timeout=5)
    if failure:
        raise failure[0]
