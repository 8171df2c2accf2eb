"""Write pip's ``--hash=sha256:...`` lines into the pinned requirements files, from their pinned versions.

The one command that regenerates them (run it after changing a pin; it needs the network for PyPI):

    .venv/bin/python infra/pin_hashes.py            # rewrite the four files below in place
    .venv/bin/python infra/pin_hashes.py --check    # change nothing; exit 1 if a file's hashes are not current
    .venv/bin/python infra/pin_hashes.py infra/k8s/requirements-worker.txt     # only the files named

The installers (infra/install.sh, infra/k8s/install-worker.sh, infra/verifiers/install.sh, infra/nemo-gym/install.sh)
run ``pip install --no-deps --require-hashes -r FILE``: a wheel whose bytes are not one of its pin's hashes (tampered
with, or substituted on an index or in the local wheel directory) fails the install with pip's own "THESE PACKAGES DO
NOT MATCH THE HASHES FROM THE REQUIREMENTS FILE" (tests/unit/test_requirement_hashes.py).

How a pin's hashes are found: pip's own ``PackageFinder`` (``pip._internal``, the pip of the Python that runs this
script), built from this machine's pip configuration exactly as ``pip download`` builds it (PyPI, the extra indexes,
the find-links wheel directory, environment variables), lists every file of every index for the project; the hashes
are those of every file that matches the ``==`` pin and that pip could install on this platform for the file's
Python (3.11, or 3.12 for nemo-gym; its wheel tags, any patch release): each compatible wheel and any source
archive, from every index. pip picks one of
them on the install machine (the local mirror's or PyPI's copy, the best-tagged wheel), so every one is listed. A
local file (``file://`` index, find-links directory: torch's +cpu wheel) is hashed from its bytes; a remote file is
given the sha256 that its index publishes with it (PyPI publishes one for every file), and downloaded and hashed
where an index gives none. The global constraint file (/etc/xdg/pip/constraints.txt) holds no hashes and is not
touched: pip intersects a constraint's hashes with the requirement's only where the constraint has some.

Comment lines, blank lines and the order of the pins stay as they are; a pin's old ``--hash`` options are replaced by
the ones found now, sorted, one per continuation line::

    aiohttp==3.14.5 \\
        --hash=sha256:0123... \\
        --hash=sha256:4567...
"""

from __future__ import annotations

import argparse
import hashlib
import logging
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# each hashed file and the Python (major, minor) that its installer creates the environment with
FILES: dict[str, tuple[int, int]] = {
    "infra/requirements-cpu.txt": (3, 11),
    "infra/k8s/requirements-worker.txt": (3, 11),
    "infra/verifiers/requirements.txt": (3, 11),
    "infra/nemo-gym/requirements.txt": (3, 12),
}


@dataclass
class Entry:
    """One logical line of a requirements file: its physical lines and, for a pin, the requirement text."""

    lines: list[str]
    requirement: str | None = None  # "name==version" as written in the file; None for comments and blank lines


def parse(text: str) -> list[Entry]:
    """The file's logical lines (a line ending in a backslash continues on the next, as pip reads it)."""
    entries: list[Entry] = []
    group: list[str] = []
    for line in text.splitlines():
        group.append(line)
        if line.rstrip().endswith("\\") and not line.lstrip().startswith("#"):
            continue
        joined = " ".join(part.rstrip().removesuffix("\\").strip() for part in group).strip()
        if not joined or joined.startswith("#"):
            entries.append(Entry(group))
        else:
            words = [w for w in joined.split() if not w.startswith("--hash=")]
            if len(words) != 1 or words[0].startswith("-") or "==" not in words[0]:
                raise SystemExit(
                    f"pin_hashes: only `name==version` lines (and --hash options) are supported: {joined!r}"
                )
            entries.append(Entry(group, words[0]))
        group = []
    if group:  # a dangling continuation at the end of the file
        raise SystemExit(f"pin_hashes: the file ends inside a continued line: {group!r}")
    return entries


def render(entries: list[Entry], hashes: dict[str, list[str]]) -> str:
    out: list[str] = []
    for entry in entries:
        if entry.requirement is None:
            out.extend(entry.lines)
        else:
            lines = [entry.requirement] + [f"    --hash=sha256:{h}" for h in hashes[entry.requirement]]
            out.append(" \\\n".join(lines))
    return "\n".join(out) + "\n"


def _sha256_file(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


class _QuietMissingIndexPage(logging.Filter):
    """Drop pip's "Location 'file:///opt/pypi/simple/x/' is ignored" for a project the local mirror lacks (the
    installers filter the same line)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "is ignored: it is neither a file nor a directory" not in record.getMessage()


class Finder:
    """pip's PackageFinder for one target Python, configured as `pip download` on this machine would be."""

    def __init__(self, python: tuple[int, int]):
        from pip._internal.commands import create_command
        from pip._internal.models.target_python import TargetPython

        logging.getLogger("pip._internal.index.sources").addFilter(_QuietMissingIndexPage())
        command = create_command("download")
        options, _ = command.parse_args([])  # reads pip.conf files and PIP_* variables, as every pip command does
        self.session = command._build_session(options)
        self.finder = command._build_package_finder(
            options=options,
            session=self.session,
            target_python=TargetPython(py_version_info=python),
            # the pin was resolved for this Python already; a file of it that asks for a newer patch release than
            # the install machine has is skipped there, and its hash here does no harm (no patch release assumed)
            ignore_requires_python=True,
        )

    def hashes(self, requirement: str) -> list[str]:
        """sha256 of every file that pip could install for this pin on this platform (sorted, no duplicates)."""
        from pip._vendor.packaging.requirements import Requirement

        req = Requirement(requirement)
        result = self.finder.find_best_candidate(req.name, specifier=req.specifier)
        found: set[str] = set()
        for candidate in result.iter_applicable():
            link = candidate.link
            if link.is_file:
                digest = _sha256_file(link.file_path)
                if link.hash_name == "sha256" and link.hash != digest:
                    print(f"pin_hashes: warning: {link.url} is not the sha256 its index gives", file=sys.stderr)
            elif link.hash_name == "sha256" and link.hash:
                digest = link.hash
            else:  # an index that publishes no sha256: download the file and hash it
                response = self.session.get(link.url_without_fragment, stream=True)
                response.raise_for_status()
                sha = hashlib.sha256()
                for block in response.iter_content(1 << 20):
                    sha.update(block)
                digest = sha.hexdigest()
            found.add(digest)
        if not found:
            raise SystemExit(f"pin_hashes: no file of {requirement} that pip could install here")
        return sorted(found)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("files", nargs="*", help=f"files to hash (default: all of {', '.join(FILES)})")
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 if a file is not current")
    parser.add_argument("--jobs", type=int, default=8, help="index look-ups at a time (default 8)")
    args = parser.parse_args(argv)

    chosen = [Path(f).resolve().relative_to(ROOT).as_posix() for f in args.files] or list(FILES)
    unknown = [f for f in chosen if f not in FILES]
    if unknown:
        parser.error(f"not a hashed requirements file: {unknown} (known: {list(FILES)})")

    parsed = {f: parse((ROOT / f).read_text()) for f in chosen}
    finders = {python: Finder(python) for python in {FILES[f] for f in chosen}}
    work = sorted({(FILES[f], e.requirement) for f in chosen for e in parsed[f] if e.requirement})
    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        results = dict(zip(work, pool.map(lambda item: finders[item[0]].hashes(item[1]), work)))

    stale = []
    for f in chosen:
        hashes = {e.requirement: results[(FILES[f], e.requirement)] for e in parsed[f] if e.requirement}
        new = render(parsed[f], hashes)
        pins, total = len(hashes), sum(len(h) for h in hashes.values())
        if new == (ROOT / f).read_text():
            print(f"{f}: {pins} pins, {total} hashes, up to date")
            continue
        stale.append(f)
        if args.check:
            print(f"{f}: {pins} pins, {total} hashes, NOT current: run .venv/bin/python infra/pin_hashes.py")
        else:
            (ROOT / f).write_text(new)
            print(f"{f}: {pins} pins, {total} hashes, written")
    return 1 if args.check and stale else 0


if __name__ == "__main__":
    sys.exit(main())
