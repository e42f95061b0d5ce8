"""The shipped Prometheus alert rules (checked and unit-tested by promtool) and the example Grafana dashboard."""

from __future__ import annotations

from pathlib import Path

from spanner_cdc.ui.metrics import FAMILIES
from tests.fixtures.monitoring import AFTER_VERIFY, RULE_TESTS, RULES, metrics_used, run_promtool


def test_the_rules_and_the_dashboard_query_only_metrics_the_ui_exports() -> None:
    used = metrics_used()
    assert used[RULES.name] >= {
        "spanner_cdc_retention_headroom_seconds", "spanner_cdc_freshness_seconds", "spanner_cdc_stuck_partitions",
        "spanner_cdc_open_window_age_seconds", "spanner_cdc_failed_window_checks", "spanner_cdc_verify_mismatches",
    }  # fmt: skip
    assert AFTER_VERIFY <= set(FAMILIES)
    for name, metrics in used.items():
        assert metrics and metrics <= set(FAMILIES), f"{name} queries metrics /metrics does not export: {metrics - set(FAMILIES)}"


def test_promtool_accepts_the_rules() -> None:
    checked = run_promtool("check", "rules", str(RULES), cwd=RULES.parent)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "SUCCESS: 7 rules found" in checked.stdout


def test_the_rules_unit_tests_pass_under_promtool(tmp_path: Path) -> None:
    tested = run_promtool("test", "rules", str(RULE_TESTS), cwd=RULES.parent)
    assert tested.returncode == 0, tested.stdout + tested.stderr
    # and they can fail: the headroom warning without its `for` fires earlier than the tests expect
    broken = tmp_path / RULES.name
    broken.write_text(RULES.read_text().replace("        for: 5m\n", "", 1))
    (tmp_path / RULE_TESTS.name).write_text(RULE_TESTS.read_text())
    failed = run_promtool("test", "rules", RULE_TESTS.name, cwd=tmp_path)
    assert failed.returncode != 0 and "SpannerCdcRetentionHeadroomLow" in failed.stdout + failed.stderr
    # and a verify alert that waited before firing misses the unit test's mismatch at once
    broken.write_text(RULES.read_text().replace("expr: spanner_cdc_verify_mismatches > 0\n", "expr: spanner_cdc_verify_mismatches > 0\n        for: 5m\n"))
    failed = run_promtool("test", "rules", RULE_TESTS.name, cwd=tmp_path)
    assert failed.returncode != 0 and "SpannerCdcVerifyMismatches" in failed.stdout + failed.stderr
