"""The service's counters, gauges and histograms in Prometheus text format (``GET /metrics``), without a client
library: a handful of series, thread-safe, rendered on request.

    dr_requests_total{route,status}     requests answered, by route and HTTP status
    dr_request_seconds{route}           latency histogram
    dr_batches_total{outcome}           engine batches (ok | engine_failure | batch_failure)
    dr_batch_sets                       sets per batch (histogram)
    dr_queue_depth, dr_open_groups      sets waiting for the engines; groups still collecting members
    dr_unscorable_total                 responses answered with no reward (unscorable)
    dr_group_timeouts_total             groups that timed out incomplete
    dr_engine_failures_total            batches failed by an engine (503)
    dr_stage_seconds_total{stage}       seconds spent generating rubrics, verifying, writing the store
    dr_stage_tokens_total{stage,kind}   prompt and completion tokens per engine stage
    dr_verdict_cache_hits_total         verdicts answered from the verdict cache (not asked of the verifier)
    dr_verdict_cache_misses_total       verdicts the cache did not hold (asked of the verifier)
    dr_verdict_cache_entries            verdicts the cache holds (at most --verdict-cache-entries)
    dr_resident_bytes                   the process's resident set now (RSS)
    dr_memory_trims_total               malloc_trim calls (--memory-trim-interval)
    dr_memory_trimmed_bytes_total       resident bytes those calls gave back to the system
    dr_resident_after_trim_bytes        the resident set right after the last trim: the live memory's level
"""

from __future__ import annotations

import threading
from collections import defaultdict
from typing import Callable

LATENCY_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 1024)


class Histogram:
    def __init__(self, buckets):
        self.buckets = tuple(buckets)
        self.counts = [0] * len(self.buckets)
        self.sum, self.count = 0.0, 0

    def observe(self, v: float) -> None:
        for i, b in enumerate(self.buckets):
            if v <= b:
                self.counts[i] += 1
        self.sum += v
        self.count += 1


def _labels(d: dict) -> str:
    if not d:
        return ""
    esc = {k: str(v).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") for k, v in d.items()}
    return "{" + ",".join(f'{k}="{v}"' for k, v in sorted(esc.items())) + "}"


class Metrics:
    HELP = {
        "dr_requests_total": ("counter", "Requests answered, by route and HTTP status."),
        "dr_request_seconds": ("histogram", "Request latency in seconds, by route."),
        "dr_batches_total": ("counter", "Engine batches, by outcome."),
        "dr_batch_sets": ("histogram", "Response sets per engine batch."),
        "dr_unscorable_total": ("counter", "Responses answered without a reward (unscorable)."),
        "dr_group_timeouts_total": ("counter", "Groups that timed out before their last member arrived."),
        "dr_engine_failures_total": ("counter", "Batches failed by an engine (answered 503)."),
        "dr_stage_seconds_total": ("counter", "Seconds spent per stage (generation, verification, store)."),
        "dr_stage_tokens_total": ("counter", "Prompt and completion tokens per engine stage."),
        "dr_queue_depth": ("gauge", "Sets waiting for the engines."),
        "dr_open_groups": ("gauge", "Groups still collecting members."),
        "dr_verdict_cache_hits_total": ("counter", "Verdicts answered from the verdict cache."),
        "dr_verdict_cache_misses_total": ("counter", "Verdicts the verdict cache did not hold (asked)."),
        "dr_verdict_cache_entries": ("gauge", "Verdicts the verdict cache holds (at most --verdict-cache-entries)."),
        "dr_resident_bytes": ("gauge", "Resident set of the dr serve process (RSS), bytes."),
        "dr_memory_trims_total": ("counter", "malloc_trim calls (--memory-trim-interval)."),
        "dr_memory_trimmed_bytes_total": ("counter", "Resident bytes given back to the system by malloc_trim."),
        "dr_resident_after_trim_bytes": ("gauge", "Resident set right after the last malloc_trim, bytes."),
    }

    def __init__(self):
        self._lock = threading.Lock()
        self._counters: dict[str, dict[tuple, float]] = defaultdict(lambda: defaultdict(float))
        self._hists: dict[str, dict[tuple, Histogram]] = defaultdict(dict)
        self._gauges: dict[str, Callable[[], float]] = {}
        for name in ("dr_unscorable_total", "dr_group_timeouts_total", "dr_engine_failures_total"):
            self._counters[name][()] += 0  # present at 0 from the start

    def inc(self, name: str, value: float = 1, **labels) -> None:
        with self._lock:
            self._counters[name][tuple(sorted(labels.items()))] += value

    def observe(self, name: str, value: float, **labels) -> None:
        buckets = LATENCY_BUCKETS if name == "dr_request_seconds" else BATCH_BUCKETS
        with self._lock:
            key = tuple(sorted(labels.items()))
            self._hists[name].setdefault(key, Histogram(buckets)).observe(value)

    def gauge(self, name: str, read: Callable[[], float]) -> None:
        """A value read when the metrics are rendered (a gauge, or a counter kept elsewhere: its ``HELP`` kind)."""
        self._gauges[name] = read

    def value(self, name: str, **labels) -> float:
        """A counter's value (tests and the benchmark read it)."""
        with self._lock:
            return self._counters[name].get(tuple(sorted(labels.items())), 0.0)

    def render(self) -> str:
        out: list[str] = []
        with self._lock:
            for name in sorted(set(self._counters) | set(self._hists) | set(self._gauges)):
                kind, help_ = self.HELP.get(name, ("untyped", name))
                out += [f"# HELP {name} {help_}", f"# TYPE {name} {kind}"]
                for key, v in sorted(self._counters.get(name, {}).items()):
                    out.append(f"{name}{_labels(dict(key))} {v:g}")
                for key, h in sorted(self._hists.get(name, {}).items()):
                    labels = dict(key)
                    for b, c in zip(h.buckets, h.counts):
                        out.append(f"{name}_bucket{_labels({**labels, 'le': f'{b:g}'})} {c}")
                    out.append(f"{name}_bucket{_labels({**labels, 'le': '+Inf'})} {h.count}")
                    out.append(f"{name}_sum{_labels(labels)} {h.sum:.6f}")
                    out.append(f"{name}_count{_labels(labels)} {h.count}")
                if name in self._gauges:
                    out.append(f"{name} {float(self._gauges[name]()):g}")
        return "\n".join(out) + "\n"
