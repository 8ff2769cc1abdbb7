"""The benchmark must not rot: each case runs in-process at tiny N and yields complete,
positive figures, and the CLI writes the JSON the README table is made from."""
from __future__ import annotations

import json
import math

import pytest

from bench import __main__ as bench_main
from bench.cases import cost as case_cost, fanout as case_fanout, growth as case_growth, resume as case_resume, scale as case_scale, steps as case_steps, dbos_rig, harness
import bench.report.readme_table as readme_table
from offload.engine import engine as offload_engine
from tools import async_delegation as ad

pytestmark = pytest.mark.timeout(60)


@pytest.fixture(autouse=True)
def _clean_engine():
    ad._reset_for_tests()
    yield
    ad._reset_for_tests()


def _quiet(_line: str) -> None:
    pass


def _assert_figures(result: dict, *, case: int) -> None:
    assert result["case"] == case and not result.get("error")
    assert result["headlines"], "every case reports at least one headline ratio"
    for row in [*result["headlines"], *result.get("checks", [])]:
        assert {"name", "median", "p95", "target", "met", "rounds"} <= row.keys()
        assert row["median"] > 0 and math.isfinite(row["median"]), row
        assert row["p95"] >= row["median"] - 1e-12, row
    for name, spread in _leaves(result["metrics"]):
        assert spread["median"] >= 0 and math.isfinite(spread["median"]), name


def _leaves(metrics: dict, prefix: str = ""):
    for name, row in metrics.items():
        if "median" in row:
            yield prefix + name, row
        else:
            yield from _leaves(row, f"{prefix}{name}.")


def test_cost_case_completes_every_delegation_in_each_system(tmp_path):
    n = 40
    result = case_cost.run(n, 2, tmp_path, log=_quiet)
    _assert_figures(result, case=1)
    for system in case_cost.SYSTEMS:
        assert result["metrics"][system]["completed"]["min"] == n, system
        assert result["metrics"][system]["delegations_per_s"]["median"] > 0
    assert {h["name"].split(":")[0] for h in result["headlines"]} >= {"offload / floor", "offload / huey"}


def test_scale_case_measures_sweep_listing_and_memory(tmp_path):
    result = case_scale.run(5, 20, 2, tmp_path, log=_quiet)
    _assert_figures(result, case=2)
    assert result["metrics"]["heap_kib_per_unit"]["median"] > 0
    assert [c["unit"] for c in result["checks"]] == ["ms", "ms"]


def test_growth_case_replays_every_pending_row(tmp_path):
    result = case_growth.run(300, 20, 100, 2, tmp_path, burst=10, log=_quiet)
    _assert_figures(result, case=3)
    assert result["metrics"]["replay_small_rows"]["min"] == 20
    assert result["metrics"]["replay_large_rows"]["min"] == 100


def test_fanout_case_runs_in_this_checkout(tmp_path):
    result = case_fanout.run(3, 2, 0.05, 2, tmp_path, log=_quiet)
    assert result["skipped"] is None, result["skipped"]  # the agent and the model server are both here
    _assert_figures(result, case=4)
    stream_s = result["metrics"]["text_chunks_x_delay_s"]["median"]
    for mode in ("floor", "one_unit", "per_child_units"):
        assert result["metrics"][f"{mode}_wall_s"]["min"] >= stream_s, mode


def test_cli_writes_the_json_the_readme_table_comes_from(tmp_path, monkeypatch):
    out = tmp_path / "bench.json"
    monkeypatch.setattr(bench_main, "QUICK", {**bench_main.QUICK, "cost_n": 20, "rows": 100, "replay": (10, 50),
                                              "burst": 5, "scale": (4, 12), "fanout": (2, 2, 0.05)})
    assert bench_main.main(["--quick", "--rounds", "1", "--cases", "1,3", "--json", str(out)]) == 0
    payload = json.loads(out.read_text())
    assert payload["quick"] is True and set(payload["cases"]) == {"1", "3"}
    assert payload["machine"]["nproc"] >= 1 and payload["machine"]["python"]
    assert payload["command"].startswith("python -m bench --quick")
    markdown = readme_table.table(payload)
    assert "| 1. per-delegation cost | offload / floor: wall time per delegation |" in markdown
    assert "n/a" not in markdown and payload["command"] in readme_table.machine_line(payload)


def test_step_log_case_compares_offload_with_and_without_its_log_and_dbos(tmp_path, monkeypatch):
    monkeypatch.delenv("OFFLOAD_BENCH_POSTGRES_DSN", raising=False)
    monkeypatch.delenv("OFFLOAD_TEST_POSTGRES_DSN", raising=False)
    result = case_steps.run(2, 3, 1, tmp_path, log=_quiet)
    assert result["case"] == 7 and not result.get("error")
    assert result["params"]["offload_sqlite"] == {"journal_mode": "wal", "synchronous": 2}  # WAL, FULL
    assert "PostgreSQL side skipped" in " ".join(result["notes"])
    metrics = result["metrics"]
    for name in ("offload_never", "offload_log"):
        assert metrics[f"{name}_wall_per_step_us"]["median"] > 0 and metrics[f"{name}_cpu_per_step_us"]["median"] > 0
    if dbos_rig.available() is None:
        assert result["params"]["dbos_sqlite"] == result["params"]["offload_sqlite"]  # the same durability
        assert metrics["dbos_steps_wall_per_step_us"]["median"] > 0
        assert result["headlines"][0]["name"].startswith("offload / DBOS")
    else:
        assert "DBOS side skipped: dbos is not installed" in " ".join(result["notes"])


def test_the_step_log_case_writes_every_step_durably(tmp_path, monkeypatch):
    """The figure is worth something only if each step really reached the ledger, fenced: per
    step the reply with its call's start mark in one write, the call's result in another."""
    written: list[tuple[list[str], bool]] = []
    real = offload_engine.Delegations.record_steps

    def spy(self, delegation_id, task_index, steps):
        kept = real(self, delegation_id, task_index, steps)
        written.append(([kind for _, kind, _ in steps], kept))
        return kept
    monkeypatch.setattr(offload_engine.Delegations, "record_steps", spy)
    harness.new_home(tmp_path, "steps")
    case_steps._run_units(2, 3, tmp_path, log=True)
    assert [kinds for kinds, _ in written] == [["reply", "tool_start"], ["tool_result"]] * 3 * 3  # 1 untimed + 2
    assert all(kept for _, kept in written)


@pytest.mark.timeout(120)
def test_resume_case_times_a_killed_owners_child_resumed_by_offload_mcp(tmp_path, monkeypatch):
    monkeypatch.delenv("OFFLOAD_BENCH_POSTGRES_DSN", raising=False)
    monkeypatch.delenv("OFFLOAD_TEST_POSTGRES_DSN", raising=False)
    result = case_resume.run(1, tmp_path, log=_quiet)
    assert result["case"] == 8 and result["skipped"] is None, result.get("skipped")
    resumed_s = result["metrics"]["sqlite_resume_s"]["median"]
    assert 0 < resumed_s < case_resume.DEADLINE_S and result["checks"][0]["unit"] == "s"
    assert "PostgreSQL side skipped" in " ".join(result["notes"])
    assert bench_main.case_plan(bench_main.QUICK, 1, tmp_path, _quiet)[8]()["skipped"]  # full run only
