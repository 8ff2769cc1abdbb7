"""Case 7's DBOS side: ``bench.cases.step_loop``'s child run as a DBOS workflow on a SQLite system
database, each model call and each tool call a DBOS step (``stepped``), and the same loop in a
workflow with no step (``bare``: what a workflow costs around the loop, so the per-step figure is
the steps' own cost, as offload's is its step writes').

Durability as offload's ledger: the system database file is put in WAL mode before DBOS opens it
(``harness.make_wal_db``, what the session store does to state.db); neither side sets
``synchronous``, so both run SQLite's default, FULL (every commit syncs the WAL); ``pragmas()``
reads what DBOS's own connection runs with, for the report. DBOS is optional (the ``bench``
extra): ``available()`` says why not.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from bench.cases import harness, step_loop

_functions: dict[str, Any] = {}  # registered once per process: DBOS refuses a second registration


def available() -> str | None:
    """None if DBOS can run here, else why not (the case's skip note)."""
    try:
        import dbos  # noqa: F401
    except ImportError:
        return "dbos is not installed: pip install -e '.[bench]' (DBOS is in the bench extra only)"
    return None


class _SteppedTurns:
    """The scripted model, each call a DBOS step."""

    def __init__(self, inner: step_loop.ScriptedTurns) -> None:
        self.inner = inner

    def stream_turn(self, messages, tools, *, on_activity=None, should_stop=None, on_text=None):
        return _functions["model_step"](self.inner, messages, tools)


def _register() -> dict[str, Any]:
    if _functions:
        return _functions
    from dbos import DBOS

    @DBOS.step(name="bench_model_call")
    def model_step(llm: step_loop.ScriptedTurns, messages: list, tools: list) -> Any:
        return llm.stream_turn(messages, tools)

    @DBOS.step(name="bench_tool_call")
    def tool_step(args: dict[str, Any]) -> str:
        return step_loop.poke(args, None)

    @DBOS.workflow(name="bench_child_stepped")
    def stepped(steps: int, workspace: str) -> dict[str, Any]:
        return step_loop.run_child(steps, Path(workspace), llm=_SteppedTurns(step_loop.ScriptedTurns(steps)))

    @DBOS.workflow(name="bench_child_bare")
    def bare(steps: int, workspace: str) -> dict[str, Any]:
        return step_loop.run_child(steps, Path(workspace))

    _functions.update(model_step=model_step, tool_step=tool_step, stepped=stepped, bare=bare)
    return _functions


class DbosRig:
    """One launched DBOS on a fresh SQLite system database under ``home``."""

    def __init__(self, home: Path) -> None:
        from dbos import DBOS

        functions = _register()
        self.path = harness.make_wal_db(home / "dbos_system.sqlite")
        self.functions = functions
        DBOS(config={"name": "offload-bench", "system_database_url": f"sqlite:///{self.path}",
                     "run_admin_server": False, "log_level": "WARNING"})
        DBOS.launch()

    def run(self, stepped: bool, steps: int, workspace: Path) -> dict[str, Any]:
        if stepped:
            step_loop.register(lambda args, ctx: self.functions["tool_step"](args))
            return self.functions["stepped"](steps, str(workspace))
        step_loop.register()
        return self.functions["bare"](steps, str(workspace))

    def pragmas(self) -> dict[str, Any]:
        """journal_mode and synchronous as DBOS's own connection sees them."""
        from dbos import _dbos

        engine = _dbos._dbos_global_instance._sys_db.engine  # type: ignore[union-attr]
        with engine.connect() as conn:
            return {"journal_mode": conn.exec_driver_sql("PRAGMA journal_mode").scalar(),
                    "synchronous": conn.exec_driver_sql("PRAGMA synchronous").scalar()}

    def operations(self) -> int:
        """Step outputs DBOS recorded (a check that the steps were durable, not skipped)."""
        import sqlite3

        with sqlite3.connect(self.path) as conn:
            return conn.execute("SELECT count(*) FROM operation_outputs").fetchone()[0]

    def close(self) -> None:
        from dbos import DBOS

        DBOS.destroy()
        step_loop.register()
