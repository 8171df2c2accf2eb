"""The documentation site's generated pages (infra/docs/): each holds what the code declares, and the benchmark
results carry their provenance. Expectations come from the code (the typer app, sql/, the store's schemas, the
service's routes, the config models), not from lists kept here. No model is loaded."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from infra.docs import md, ref_cli, ref_config, ref_data, ref_http, results, tables

ROOT = Path(__file__).resolve().parents[2]


def test_every_results_file_has_provenance_and_every_entry_a_file():
    files = set(results.result_files())
    entries = set(yaml.safe_load(results.PROVENANCE.read_text(encoding="utf-8")))
    assert files, "no results files found"
    assert not files - entries, f"results files without a provenance.yaml entry: {sorted(files - entries)}"
    assert not entries - files, f"provenance.yaml entries without a file: {sorted(entries - files)}"
    for name, info in results.provenance().items():
        assert all(info[k].strip() for k in results.FIELDS), name
        assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", info["date"]), (name, info["date"])


def test_provenance_dates_are_the_files_commit_dates():
    git = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--git-dir"], capture_output=True)
    if git.returncode != 0:
        pytest.skip("not a git checkout")
    shallow = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "--is-shallow-repository"], capture_output=True, text=True
    ).stdout.strip()
    if shallow == "true":  # a shallow clone dates every file by its one commit: nothing to compare with
        pytest.skip("shallow clone: the files' commit dates are not known here")
    for name, info in results.provenance().items():
        out = subprocess.run(
            ["git", "-C", str(ROOT), "log", "--format=%as", "-1", "--", f"infra/benchmarks/results/{name}"],
            capture_output=True,
            text=True,
        ).stdout.strip()
        if out:  # a file not committed yet has no date to compare with
            assert info["date"] == out, f"{name}: provenance date {info['date']}, last commit {out}"


def test_cli_page_lists_every_command_and_option():
    page = ref_cli.page()
    nodes = ref_cli.commands()
    assert len(nodes) > 10
    for node in nodes:
        assert f"`{node.name}`" in page, node.name
        for param in node.command.params:
            if not getattr(param, "hidden", False) and param.param_type_name == "option":
                assert f"`{ref_cli._names(param, param.get_help_record(node.ctx))}`" in page, (node.name, param.opts)
    assert "`dr model list`" in page and "`dr model prepare`" in page  # the subcommand group is walked


def test_cli_page_hides_hidden_options():
    class Param:
        hidden, param_type_name = True, "option"

    class Node:
        command = type("C", (), {"params": [Param()]})()
        ctx = None

    assert ref_cli.param_rows(Node()) == []


def test_sql_page_has_every_query_and_parameter():
    page = ref_data.sql_page()
    names = sorted(p.stem for p in (ROOT / "sql").glob("*.sql"))
    assert names
    for query in ref_data.queries():
        assert f"## `{query.name}`" in page
        for param in query.params:
            assert f"`{param}`" in page, (query.name, param)
    assert [q.name for q in ref_data.queries()] == names


def test_store_page_has_every_table_column_and_partition_key():
    from dr_core.store.schemas import TABLES

    page = ref_data.store_page()
    for spec in TABLES.values():
        section = page.split(f"## `{spec.name}`", 1)[1].split("\n## ", 1)[0]
        for field in spec.schema:
            assert f"`{field.name}` | `{field.type}`" in section, (spec.name, field.name)
        assert "Partitioned by " + ", ".join(f"`{k}`" for k in spec.partition_by) in section


def test_http_page_has_every_route_of_the_schema_and_the_body_fields():
    schema = ref_http.openapi()
    page = ref_http.page(schema)
    assert schema["paths"]
    for path, methods in schema["paths"].items():
        for method in methods:
            assert f"`{method.upper()} {path}`" in page
    from dr_core.service.requests import ScoreSet

    body = schema["paths"]["/v1/score-set"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    assert body["$ref"].endswith("/ScoreSet")
    for field in ScoreSet.model_fields:
        assert f"`{field}`" in page
    assert "[openapi.json](../api/openapi.json)" in page and "ErrorBody" in page


def test_configuration_page_has_every_model_and_field_with_its_default():
    from dr_core.config import CoevolveConfig, EngineConfig, RoundConfig
    from dr_core.config.service import ServiceSettings

    page = ref_config.page()
    found = ref_config.models()
    for model in (CoevolveConfig, RoundConfig, EngineConfig, ServiceSettings):
        assert model in found
    for model in found:
        section = page.split(f"## {model.__name__} ", 1)[1].split("\n## ", 1)[0]
        for name in model.model_fields:
            assert f"| `{name}` |" in section, (model.__name__, name)
    k = RoundConfig.model_fields["k"]
    assert f"| `k` | `int` | `{k.default}` |" in page and md.cell(k.description) in page
    assert "### `tiny`" in page and "### `paper`" in page


def test_a_field_without_description_is_listed_not_invented():
    from pydantic import BaseModel

    class Bare(BaseModel):
        x: int = 3

    assert ref_config.undocumented([Bare]) == ["Bare.x"]
    assert "(no description; type `int`)" in ref_config.section(Bare)


def test_results_page_lists_every_file_with_its_provenance():
    page = results.page()
    for name, info in results.provenance().items():
        assert f"{{#{results.anchor(name)}}}" in page
        assert md.text(info["date"]) in page and md.text(info["machine"]) in page


def test_marker_is_replaced_and_an_unknown_name_fails():
    name = results.result_files()[0]
    info = results.provenance()[name]
    text = f"before\n<!-- dr:results {name} -->\nafter\n"
    out = results.replace_markers(text, "benchmarks/evaluator.md")
    assert "dr:results" not in out and out.startswith("before\n") and out.endswith("after\n")
    assert md.text(info["machine"]) in out and f"(results.md#{results.anchor(name)})" in out
    assert f"(../benchmarks/results.md#{results.anchor(name)})" in results.replace_markers(text, "how-to/x.md")
    with pytest.raises(results.UnknownResult, match=r"how-to/x\.md.*nope\.json"):
        results.replace_markers("<!-- dr:results nope.json -->\n", "how-to/x.md")


def test_tables_flatten_nested_results_readably():
    data = {
        "a": 1.23456789,
        "b": {"c": [1, 2]},
        "rows": [{"x": 1, "y": {"z": 2}}] * 30,
        "steps": {f"s{i}": {"t": i} for i in range(8)},
    }
    out = tables.render(data)
    assert "`a` | 1\\.235" in out and "`b.c` | &#91;1, 2&#93;" in out
    assert "| x | y\\.z |" in out and f"30 rows; the first {tables.MAX_ROWS} shown." in out
    assert "| steps | t |" in out and "| `s1` | 1 |" in out  # many alike objects of few keys: one row per key


def test_alike_branches_are_pivoted_one_row_per_leaf_one_column_per_branch():
    log = "\n".join(f"line {i}" for i in range(50))
    data = {
        "baseline": "abc",
        "old": {"first": {"wall_s": 418.0, "gen": {"s": 114.08238936}, "log": log}, "rerun": {"wall_s": 10.2}},
        "new": {"first": {"wall_s": 206.5, "gen": {"s": 35.2039}, "log": log}, "rerun": {"wall_s": 10.3}},
    }
    out = tables.render(data)
    assert "|  | old / first | old / rerun | new / first | new / rerun |" in out
    assert "| `wall_s` | 418 | 10\\.2 | 206\\.5 | 10\\.3 |" in out
    assert "| `gen.s` | 114\\.1 |  | 35\\.2 |  |" in out  # empty where a branch lacks the key
    assert "| `log` | (log, 50 lines) |  | (log, 50 lines) |  |" in out and "line 7" not in out
    assert "| `baseline` | abc |" in out


def test_pivot_rows_and_columns_and_a_shared_object_of_objects():
    columns = [
        ("a", {"x": 1, "steps": {"s1": {"sec": 1.0, "state": "ok"}, "s2": {"sec": 2.0, "state": "ok"}}}),
        ("b", {"x": 2, "y": 3, "steps": {"s1": {"sec": 0.5, "state": "ok"}, "s2": {"sec": 0.25, "state": "ok"}}}),
    ]
    (label, main), (where, steps) = tables.pivot(columns, "run")
    assert label == "run" and main.splitlines()[0] == "|  | a | b |"
    assert main.splitlines()[2:] == ["| `x` | 1 | 2 |", "| `y` |  | 3 |"]
    assert where == "run.steps" and steps.splitlines()[0] == "| steps | sec (a) | sec (b) |"
    assert "| `s2` | 2 | 0\\.25 |" in steps and "`state` ok" in steps  # a field with one value throughout is a note


def test_few_wide_records_become_columns_named_by_their_leading_fields():
    records = [{"arm": name, **{f"f{i}": i * k for i in range(12)}} for k, name in enumerate(["naive", "new"])]
    (label, block), *_ = tables.records_blocks(records, "arms")
    assert label == "arms" and block.splitlines()[0] == "|  | naive | new |"
    assert "| `f3` | 0 | 3 |" in block and "`arm`" not in block


def test_numbers_are_readable():
    assert [tables.number(v) for v in (418.0, 114.08238936, 0.0542, 5e-05, 5180.6121, 123456.7)] == [
        "418",
        "114.1",
        "0.0542",
        "5e-05",
        "5181",
        "123457",
    ]


def test_markdown_text_keeps_code_and_escapes_math_and_markup():
    assert md.text("see `a|b` and $x$ (y) [z]") == "see `a|b` and &#36;x&#36; (y) &#91;z&#93;"
    assert md.cell("*a*\nb") == "\\*a\\* b"


def test_importing_the_generators_loads_no_model_stack():
    code = (
        "import sys; sys.path.insert(0, %r); from infra.docs import hooks; [m() for m in hooks.GENERATED.values()]; "
        "print(sorted(k for k in ('torch', 'vllm', 'trl', 'transformers') if k in sys.modules))"
    ) % str(ROOT)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
