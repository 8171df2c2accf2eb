"""The documentation site in a real browser: ``mkdocs build --strict`` into a temporary folder, served on 127.0.0.1,
rendered by headless Chromium. The rendered pages have their title, navigation and the generated reference; no
internal link or anchor of any built page is broken; the search index covers the generated pages and a search in
the browser (``?q=``, Material's search worker) finds a command of the CLI on its reference page.

Chromium is required, not optional: ``bash infra/install-browser.sh`` installs it (Debian's ``chromium``).
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from html.parser import HTMLParser
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote, urljoin, urlsplit

import pytest

ROOT = Path(__file__).resolve().parents[2]
INSTALL = "bash infra/install-browser.sh (as root: apt-get install chromium)"


def _chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if not found and Path("/usr/bin/chromium").exists():
        found = "/usr/bin/chromium"
    if not found:
        pytest.fail(f"headless Chromium is needed for the documentation site test and is not installed: run {INSTALL}")
    return found


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("site")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    cmd = [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)]
    build = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, env=env, timeout=300)
    if build.returncode != 0:
        pytest.fail(f"mkdocs build --strict failed (exit {build.returncode}):\n{build.stdout}\n{build.stderr}")
    return out


class _Quiet(SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def server(site):
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_Quiet, directory=str(site)))
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/"
    httpd.shutdown()
    httpd.server_close()
    thread.join(10)


def _dump_dom(url: str) -> str:
    profile = tempfile.mkdtemp(prefix="dr-chromium-")
    try:
        cmd = [
            _chromium(),
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            f"--user-data-dir={profile}",
        ]
        done = subprocess.run([*cmd, "--virtual-time-budget=3000", "--dump-dom", url], capture_output=True, timeout=60)
    finally:
        shutil.rmtree(profile, ignore_errors=True)
    assert done.returncode == 0, done.stderr.decode(errors="replace")[-2000:]
    return done.stdout.decode()


def test_index_and_cli_reference_render_with_title_nav_and_commands(server):
    from infra.docs.ref_cli import commands

    index = _dump_dom(server)
    assert "<title>dynamicrubric</title>" in index
    for label in ("Concepts", "Reference", "Command line", "HTTP API", "All results"):
        assert label in index, label
    assert 'class="md-nav' in index and "md-search__input" in index  # Material's navigation and search box rendered

    cli = _dump_dom(server + "reference/cli/")
    assert "<title>Command line - dynamicrubric</title>" in cli
    top = [n for n in commands() if len(n.path) == 1]
    assert len(top) > 5
    for node in top:
        assert f'id="{node.name.replace(" ", "-")}"' in cli, node.name  # each command's section, as rendered


class _Links(HTMLParser):
    def __init__(self):
        super().__init__()
        self.links: list[str] = []
        self.ids: set[str] = set()

    def handle_starttag(self, tag, attrs):
        for name, value in attrs:
            if name == "id" and value:
                self.ids.add(value)
            if name in ("href", "src") and value and tag != "base":
                self.links.append(value)


def _target(site: Path, page: Path, link: str) -> tuple[Path | None, str]:
    """The file an internal link points to (None for an external one) and its #anchor."""
    parts = urlsplit(link)
    if parts.scheme or parts.netloc or link.startswith(("mailto:", "javascript:", "data:")):
        return None, ""
    base = "/" + page.relative_to(site).as_posix()
    path = unquote(urlsplit(urljoin(base, link)).path)
    target = site / path.lstrip("/")
    if path.endswith("/") or target.is_dir():
        target = target / "index.html"
    return target, parts.fragment


def test_no_broken_internal_link_or_anchor(site):
    pages = sorted(site.rglob("*.html"))
    assert len(pages) > 20
    parsed = {}
    for page in pages:
        parser = _Links()
        parser.feed(page.read_text(encoding="utf-8"))
        parsed[page] = parser
    broken = []
    for page, parser in parsed.items():
        for link in parser.links:
            target, anchor = _target(site, page, link)
            if target is None:
                continue
            if not target.exists():
                broken.append(f"{page.relative_to(site)}: {link} (no {target.relative_to(site)})")
            elif anchor and target.suffix == ".html" and anchor not in parsed[target].ids:
                broken.append(f"{page.relative_to(site)}: {link} (no id {anchor!r})")
    assert not broken, "broken internal links:\n" + "\n".join(broken[:50])


def test_search_index_covers_the_generated_pages(site):
    index = json.loads((site / "search" / "search_index.json").read_text(encoding="utf-8"))
    locations = {doc["location"].split("#", 1)[0] for doc in index["docs"]}
    for page in (
        "reference/cli/",
        "reference/configuration/",
        "reference/sql/",
        "reference/http-api/",
        "reference/store/",
        "benchmarks/results/",
    ):
        assert page in locations, page
    text = " ".join(
        doc["text"] + " " + doc["title"] for doc in index["docs"] if doc["location"].startswith("reference/")
    )
    assert "training_signal" in text and "/v1/score-set" in text


def test_a_search_in_the_browser_finds_a_command_on_its_reference_page(server):
    """Material opens the search with ``?q=`` and its worker indexes the site; the result list is read from the live
    page over the DevTools protocol (a pipe: no port, no extra package)."""
    with _DevTools(_chromium()) as browser:
        session = browser.open(server + "?q=coevolve")
        expression = (
            "[...document.querySelectorAll('.md-search-result__item a')].map(a => new URL(a.href).pathname).join(' ')"
        )
        found = browser.wait_for(session, expression, timeout=40)
    assert "/reference/cli/" in found.split(), found


class _DevTools:
    """Headless Chromium driven over ``--remote-debugging-pipe`` (fd 3: commands in, fd 4: replies out, NUL-ended)."""

    def __init__(self, exe: str):
        self.exe, self.next_id, self.buffer = exe, 0, b""

    def __enter__(self):
        self.profile = tempfile.mkdtemp(prefix="dr-chromium-")
        to_read, self.to_write = os.pipe()
        self.from_read, from_write = os.pipe()

        def fds():
            os.dup2(to_read, 3)
            os.dup2(from_write, 4)

        args = [self.exe, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--remote-debugging-pipe"]
        self.proc = subprocess.Popen(
            [*args, f"--user-data-dir={self.profile}", "about:blank"],
            preexec_fn=fds,
            pass_fds=(3, 4),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        os.close(to_read)
        os.close(from_write)
        return self

    def __exit__(self, *exc):
        try:
            self.call("Browser.close")
        except (OSError, RuntimeError):
            pass
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
        os.close(self.to_write)
        os.close(self.from_read)
        shutil.rmtree(self.profile, ignore_errors=True)

    def call(self, method: str, session: str | None = None, **params):
        self.next_id += 1
        message = {
            "id": self.next_id,
            "method": method,
            "params": params,
            **({"sessionId": session} if session else {}),
        }
        os.write(self.to_write, json.dumps(message).encode() + b"\0")
        while True:
            while b"\0" not in self.buffer:
                chunk = os.read(self.from_read, 1 << 16)
                if not chunk:
                    raise RuntimeError("Chromium closed the DevTools pipe")
                self.buffer += chunk
            raw, self.buffer = self.buffer.split(b"\0", 1)
            reply = json.loads(raw)
            if reply.get("id") == self.next_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply["result"]

    def open(self, url: str) -> str:
        target = self.call("Target.createTarget", url="about:blank")["targetId"]
        session = self.call("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
        self.call("Page.navigate", session=session, url=url)
        return session

    def wait_for(self, session: str, expression: str, timeout: float) -> str:
        """The expression's value once it is non-empty; the last value when ``timeout`` seconds pass."""
        deadline, value = time.monotonic() + timeout, ""
        while time.monotonic() < deadline:
            result = self.call("Runtime.evaluate", session=session, expression=expression, returnByValue=True)
            value = result["result"].get("value") or ""
            if value:
                return value
            time.sleep(0.2)
        return value
