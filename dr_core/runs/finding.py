"""A ``dr doctor`` finding (ok / problem / note, with its fix) and the HTTP health probe the network checks share
(``dr_core.runs.doctor``, ``dr_core.runs.tracking.check_tracking``)."""

from __future__ import annotations

import time
import urllib.error
import urllib.request
from dataclasses import dataclass

OK, PROBLEM, NOTE = "ok", "problem", "note"


@dataclass(frozen=True)
class Finding:
    """One line of the report: what was checked, ok / problem / note, what was found, and (a problem) its fix."""

    name: str
    status: str
    detail: str
    fix: str = ""


def http_health(name: str, health: str, fix: str, timeout_s: float, headers: dict | None = None) -> Finding:
    """``GET health``: ok with its status and time, or a problem naming the URL, what went wrong and the fix."""
    start = time.monotonic()
    try:
        with urllib.request.urlopen(urllib.request.Request(health, headers=headers or {}), timeout=timeout_s) as resp:
            status = resp.status
    except urllib.error.HTTPError as exc:
        return Finding(name, PROBLEM, f"GET {health} answered HTTP {exc.code} {exc.reason}", fix)
    except (urllib.error.URLError, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", None) or exc
        reason = getattr(reason, "strerror", None) or str(reason) or type(reason).__name__
        return Finding(name, PROBLEM, f"GET {health} failed: {reason} (timeout {timeout_s:g} s)", fix)
    ms = (time.monotonic() - start) * 1000
    return Finding(name, OK, f"GET {health} answered {status} ({ms:.0f} ms)")
