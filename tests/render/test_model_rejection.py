"""The SUBAGENT MODEL REJECTED notice: one config-level warning above the per-task wall."""
from __future__ import annotations

import pytest

import tools.process_registry_notifications as prn
from tools.process_registry_notifications import format_process_notification

# Captured at import, before the autouse fixture replaces it for every test.
REAL_DELEGATION_CONFIG = prn._delegation_config

REJECTION = "HTTP 400: upstage/solar-pro-4 is not a valid model ID"


def _rejected_batch(make_batch, summary=REJECTION):
    return make_batch([
        {"task_index": 0, "status": "completed", "summary": summary, "api_calls": 1,
         "exit_reason": "max_iterations", "truncated": True},
        {"task_index": 1, "status": "failed", "summary": None, "error": summary},
    ], model="upstage/solar-pro-4")


def test_notice_precedes_task_wall_and_names_model_provider_and_fix(make_batch, delegation_config):
    delegation_config.update(model="upstage/solar-pro-4", provider="openrouter")
    text = format_process_notification(_rejected_batch(make_batch))
    expected = (
        '⚠ SUBAGENT MODEL REJECTED: the configured Subagent Model "upstage/solar-pro-4" was '
        'rejected by provider "openrouter" (not a valid model ID).\n'
        "Every task in this batch that reports it failed for this reason before doing any work; "
        "re-dispatching will fail the same way until the model is fixed.\n"
        "Check the configured subagent model: offload config get delegation.model\n"
        "No fallback chain is configured, so no failover was attempted.\n"
        "\n--- ⚠ TASK 1/2"
    )
    assert expected in text
    assert text.count("SUBAGENT MODEL REJECTED") == 1
    assert text.index("SUBAGENT MODEL REJECTED") < text.index("TASK 1/2")


@pytest.mark.parametrize("pattern_text", [
    "upstage/solar-pro-4: model not found",
    "error code model_not_found for upstage/solar-pro-4",
    "The model `upstage/solar-pro-4` does not exist",
    "UPSTAGE/SOLAR-PRO-4 IS NOT A VALID MODEL",
])
def test_every_pattern_matches_case_insensitively(make_batch, delegation_config, pattern_text):
    delegation_config["model"] = "upstage/solar-pro-4"
    assert "SUBAGENT MODEL REJECTED" in format_process_notification(_rejected_batch(make_batch, pattern_text))


def test_absent_when_summaries_are_clean(make_batch, delegation_config):
    delegation_config["model"] = "upstage/solar-pro-4"
    text = format_process_notification(_rejected_batch(make_batch, "did the work with upstage/solar-pro-4"))
    assert "SUBAGENT MODEL REJECTED" not in text


def test_absent_when_rejection_names_a_different_model(make_batch, delegation_config):
    delegation_config["model"] = "upstage/solar-pro4"
    text = format_process_notification(_rejected_batch(make_batch, "HTTP 400: other/model-x is not a valid model ID"))
    assert "SUBAGENT MODEL REJECTED" not in text


def test_absent_when_no_model_is_configured(make_batch):
    assert "SUBAGENT MODEL REJECTED" not in format_process_notification(_rejected_batch(make_batch))


def test_fallback_chain_line_only_without_fallback_providers(make_batch, delegation_config):
    delegation_config.update(model="upstage/solar-pro-4", fallback_providers=["openai"])
    text = format_process_notification(_rejected_batch(make_batch))
    assert "SUBAGENT MODEL REJECTED" in text
    assert 'by provider "configured provider"' in text
    assert "No fallback chain" not in text


def test_single_task_notice_goes_above_the_status_line(make_evt, delegation_config):
    delegation_config["model"] = "upstage/solar-pro-4"
    text = format_process_notification(make_evt(status="failed", summary=None, error=REJECTION))
    assert "The task failed for this reason" in text
    assert text.index("SUBAGENT MODEL REJECTED") < text.index("Status: failed")


def test_a_stamped_event_names_its_dispatch_time_model_and_never_reads_the_config(make_batch, monkeypatch):
    def unreadable():
        raise AssertionError("a stamped event must not read the config")

    monkeypatch.setattr(prn, "_delegation_config", unreadable)
    stamp = {"model": "upstage/solar-pro-4", "provider": "openrouter", "has_fallback": True}
    text = format_process_notification(_rejected_batch(make_batch) | {"subagent_config": stamp})
    assert 'Subagent Model "upstage/solar-pro-4" was rejected by provider "openrouter"' in text
    assert "No fallback chain" not in text


def test_the_stamp_wins_over_the_current_config(make_batch, delegation_config):
    delegation_config["model"] = "upstage/solar-pro-4"  # what config.yaml says now
    stamp = {"model": "other/model", "provider": None, "has_fallback": False}  # what the unit ran with
    text = format_process_notification(_rejected_batch(make_batch) | {"subagent_config": stamp})
    assert "SUBAGENT MODEL REJECTED" not in text


def test_the_stamp_copies_no_fallback_entries():
    from offload.render.model_rejection import subagent_stamp

    stamp = subagent_stamp({"model": "m", "provider": "", "fallback_providers": [{"base_url": "http://x"}]})
    assert stamp == {"model": "m", "provider": None, "has_fallback": True}


def test_config_errors_fail_open(make_batch, monkeypatch):
    def broken():
        raise RuntimeError("config unreadable")

    monkeypatch.setattr(prn, "_delegation_config", broken)
    text = format_process_notification(_rejected_batch(make_batch))
    assert "SUBAGENT MODEL REJECTED" not in text
    assert "TASK 2/2" in text


def test_delegation_config_reads_the_delegation_section(write_home_config):
    write_home_config("delegation:\n  model: upstage/solar-pro-4\n  provider: upstage\n")
    config = REAL_DELEGATION_CONFIG()
    assert (config["model"], config["provider"]) == ("upstage/solar-pro-4", "upstage")


def test_delegation_config_fails_open_on_a_broken_file(write_home_config):
    write_home_config("delegation: [not, a, mapping\n")
    assert REAL_DELEGATION_CONFIG() == {}


def test_delegation_config_fails_open_when_the_loader_raises(monkeypatch):
    import offload.subagents.config as delegate_config

    monkeypatch.setattr(delegate_config, "load_delegation_config", lambda: 1 / 0)
    assert REAL_DELEGATION_CONFIG() == {}


@pytest.fixture
def write_home_config(_isolated_hermes_home):
    def write(text: str) -> None:
        (_isolated_hermes_home / "config.yaml").write_text(text, encoding="utf-8")
    return write
