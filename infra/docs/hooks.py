"""MkDocs hooks (mkdocs.yml ``hooks:``): the generated pages, and the benchmark tables in hand-written pages.

- ``on_files``: adds the pages generated from the code (``GENERATED``: the Reference section and
  benchmarks/results.md), so they cannot drift from what the code does. A file of the same name under docs/ is an
  error: these pages are not written by hand. The raw OpenAPI schema is the committed docs/api/openapi.json (the
  service's contract); the build fails when it differs from the app's schema, naming the command that rewrites it.
- ``on_page_markdown``: replaces each ``<!-- dr:results NAME.json -->`` line by that results file's tables
  (``infra/docs/results.py``); an unknown name fails the build, naming the page and the file.

MkDocs loads this file by path; the generators are modules of ``infra.docs``, imported from the repository root.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from mkdocs.exceptions import PluginError  # noqa: E402
from mkdocs.structure.files import File  # noqa: E402

from infra.docs import ref_cli, ref_config, ref_data, ref_http, results  # noqa: E402

#: Each generated page (its path under docs/) and what writes it.
GENERATED = {
    "reference/cli.md": ref_cli.page,
    "reference/configuration.md": ref_config.page,
    "reference/sql.md": ref_data.sql_page,
    "reference/http-api.md": ref_http.page,
    "reference/store.md": ref_data.store_page,
    results.PAGE: results.page,
}


def on_files(files, config):
    if drift := ref_http.contract_drift():
        raise PluginError(drift)
    for uri, make in GENERATED.items():
        if files.get_file_from_path(uri) is not None:
            raise PluginError(f"docs/{uri} is generated at build time (infra/docs/hooks.py): delete the file")
        try:
            content = make()
        except Exception as exc:  # a generator's failure is the build's, with the page it was for
            raise PluginError(f"generating {uri}: {type(exc).__name__}: {exc}") from exc
        files.append(File.generated(config, uri, content=content))
    return files


def on_page_markdown(markdown, page, config, files):
    try:
        return results.replace_markers(markdown, page.file.src_uri)
    except results.UnknownResult as exc:
        raise PluginError(str(exc)) from None
