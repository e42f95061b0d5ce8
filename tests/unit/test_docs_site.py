"""The documentation site under docs/: it builds in strict mode, its generated pages are current, and the references
name every setting, every stream key and every shipped alert."""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
import subprocess
import sys
from importlib import resources
from pathlib import Path

import pytest
import yaml

from spanner_cdc.cli import reference
from spanner_cdc.settings import Settings, env_name
from spanner_cdc.stream_config import PARSERS

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"


def _build(config: Path, site: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}  # Material's notice about MkDocs 2 is no warning of ours
    return subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file", str(config), "--site-dir", str(site)],
        capture_output=True, text=True, env=env, timeout=300,
    )  # fmt: skip


def test_site_builds_in_strict_mode(tmp_path: Path) -> None:
    built = _build(ROOT / "mkdocs.yml", tmp_path / "site")
    assert built.returncode == 0, built.stderr[-4000:]
    for page in DOCS.glob("*.md"):
        assert (tmp_path / "site" / page.stem / "index.html").exists() or page.name == "index.md", page.name


def test_a_broken_link_or_a_page_left_out_of_the_navigation_fails_the_build(tmp_path: Path) -> None:
    """The strict build is what catches them: the same site with one of each must not build."""
    shutil.copytree(DOCS, tmp_path / "docs")
    shutil.copy(ROOT / "mkdocs.yml", tmp_path / "mkdocs.yml")
    (tmp_path / "docs" / "orphan.md").write_text("# Not in the navigation\n")
    with (tmp_path / "docs" / "lake.md").open("a") as page:
        page.write("\nSee [a page that is not there](missing.md) and [an anchor that is not](dags.md#no-such-anchor).\n")
    built = _build(tmp_path / "mkdocs.yml", tmp_path / "site")
    assert built.returncode != 0
    assert "orphan.md" in built.stderr and "missing.md" in built.stderr and "no-such-anchor" in built.stderr


@pytest.mark.parametrize("name", sorted(reference.pages()))
def test_generated_pages_are_current(name: str) -> None:
    assert (DOCS / name).read_text() == reference.pages()[name], (
        f"docs/{name} is stale: run `python -m spanner_cdc.cli.reference docs` and commit it"
    )


def test_every_setting_is_in_the_configuration_reference() -> None:
    page = (DOCS / reference.CONFIGURATION_PAGE).read_text()
    settings, streams = page.split("## Streams")
    rows = {m.group(1): m.group(0) for m in re.finditer(r"^\| `(\w+)` \|.*$", settings, re.MULTILINE)}
    for field in dataclasses.fields(Settings):
        if field.name == "streams":  # the [streams.<name>] tables: the second table of the page
            continue
        assert f"| `{field.name}` |" in settings, f"setting {field.name} is missing from docs/configuration.md"
        if field.name not in reference.SETTING_SOURCES:
            assert f"`{env_name(field.name)}`" in rows[field.name], field.name
    for key in PARSERS:
        assert f"| `{key}` |" in streams, f"[streams.<name>] key {key} is missing from docs/configuration.md"


def test_every_command_is_in_the_command_reference() -> None:
    from spanner_cdc.cli.main import build_parser

    page = (DOCS / reference.CLI_PAGE).read_text()
    for path, sub in reference._leaf_commands(build_parser()):
        assert f"## `spanner-cdc {' '.join(path)}`" in page
        for action in sub._actions:
            for option in action.option_strings:
                if option.startswith("--") and option != "--help":
                    # an option's cell names its forms together: `--data-boost, --no-data-boost`
                    assert f"`{option}" in page or f", {option}" in page, f"{option} of {' '.join(path)}"


def _alerts() -> list[str]:
    rules = yaml.safe_load(resources.files("spanner_cdc.resources").joinpath("prometheus/spanner_cdc_rules.yml").read_text())
    return [rule["alert"] for group in rules["groups"] for rule in group["rules"] if "alert" in rule]


def test_every_shipped_alert_has_a_runbook() -> None:
    page = (DOCS / "operating.md").read_text()
    alerts = _alerts()
    assert alerts
    for alert in alerts:
        assert re.search(rf"^### `?{alert}`?$", page, re.MULTILINE), f"docs/operating.md has no runbook for {alert}"


def test_every_task_of_the_dags_is_in_their_docs() -> None:
    """Each task of each DAG the factory makes is named in the DAG's own doc (Airflow's Docs tab) and in docs/dags.md."""
    from spanner_cdc.airflow import dags
    from spanner_cdc.stream_config import parse_stream

    config = parse_stream("orders", {"start_date": "2024-01-01T00:00:00Z", "snapshot": True, "current_state": True, "verify": True})
    page = (DOCS / "dags.md").read_text()
    made = [dags.hourly_dag(config, 4, "/lake"), dags.maintenance_dag(config, "/lake"), dags.verify_dag(config), dags.backfill_dag()]
    for dag in made:
        for task_id in dag.task_dict:
            name = re.sub(r"^wave_\d+\.", "wave_k.", task_id)
            assert f"`{name}`" in (dag.doc_md or "") or f"`{task_id.rsplit('.', 1)[-1]}`" in (dag.doc_md or ""), (
                f"{dag.dag_id}'s doc does not name its task {task_id}"
            )
            assert f"`{task_id.rsplit('.', 1)[-1]}`" in page, f"docs/dags.md does not name {dag.dag_id}'s task {task_id}"


README = ROOT / "README.md"


def test_readme_is_the_first_ten_minutes() -> None:
    lines = README.read_text().splitlines()
    assert len(lines) <= 250, f"README.md has {len(lines)} lines: move the detail into a page under docs/"


def test_readme_links_lead_to_pages_and_headings_that_exist() -> None:
    from markdown.extensions.toc import slugify  # the slugs MkDocs gives headings (its default toc)

    links = re.findall(r"\]\(([^)\s]+)\)", README.read_text())
    assert any(link.startswith("docs/") for link in links)
    for link in links:
        if "://" in link:
            continue
        path, _, anchor = link.partition("#")
        target = ROOT / path
        assert target.exists(), f"README links to {link}: no such file"
        if anchor:
            text = target.read_text()
            fenced = re.sub(r"^```.*?^```", "", text, flags=re.MULTILINE | re.DOTALL)
            slugs = {slugify(h, "-") for h in re.findall(r"^#+ (.+?)\s*$", fenced, re.MULTILINE)}
            assert anchor in slugs, f"README links to {link}: {path} has no such heading"


def test_readme_streams_file_is_one_the_dags_accept(tmp_path: Path) -> None:
    from spanner_cdc.settings import load_settings
    from spanner_cdc.stream_config import load_streams

    blocks = re.findall(r"^```toml\n(.*?)^```", README.read_text(), re.MULTILINE | re.DOTALL)
    assert blocks, "README shows no streams file"
    for block in blocks:
        config = tmp_path / "streams.toml"
        config.write_text(block)
        assert load_streams(load_settings({}, env={"SPANNER_CDC_CONFIG": str(config)}))


def test_ci_runs_the_test_command_the_readme_gives() -> None:
    assert re.search(r"^make test\b", README.read_text(), re.MULTILINE)
    assert re.search(r"^make test$", (ROOT / ".ci" / "run").read_text(), re.MULTILINE)
