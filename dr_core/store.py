"""The artifact store: Parquet tables (schemas in ``dr_core.schemas``) in a local directory or under ``s3://``.

A store is addressed by URL: a path (or ``file://`` URL) for a local directory, ``s3://bucket/prefix`` for object
storage through s3fs. S3 endpoint, region and keys come from the environment (``AWS_ENDPOINT_URL``,
``AWS_REGION``, ``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``) or from an explicit ``S3Options``; they are never
printed, logged or written into artifacts (``repr`` hides them).

One pipeline step writes one file: ``write(table, frame, part=step, run_id=..., round=...)`` returns the file's
URI at ``<store>/<table>/run_id=<run>/round=<round>/<step>.parquet``. Writes are atomic (local: temp file in the
same directory, fsync, ``os.replace``; S3: one PUT, or a multipart upload completed only once the whole file is
uploaded) and idempotent: writing the same step again replaces its file, so rows are never duplicated.

``connect()`` gives a DuckDB connection where every table is a view of that name over the store's files.

    python -c "from dr_core.store import Store; s = Store.from_url('/tmp/st'); print(s.connect().sql('FROM anchors'))"
"""

from __future__ import annotations

import hashlib
import os
import re
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlparse

import duckdb
import fsspec
import pyarrow as pa
import pyarrow.parquet as pq

from dr_core.paths import cache_dir
from dr_core.schemas import TABLES, conform, spec, to_arrow

#: Partition values (run ids among them) and part names become path segments: keep them plain.
SEGMENT_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$"
_SEGMENT = re.compile(SEGMENT_PATTERN)


def default_store_url() -> str:
    """``$DR_STORE``, else a directory in the dynamicrubric cache (``~/.cache/dynamicrubric/store``)."""
    return os.environ.get("DR_STORE") or str(cache_dir() / "store")


@dataclass(frozen=True)
class S3Options:
    """Where and as whom to reach S3. Secrets are excluded from ``repr`` so they never reach a log line."""

    endpoint_url: str | None = None
    region: str | None = None
    key: str | None = field(default=None, repr=False)
    secret: str | None = field(default=None, repr=False)

    @classmethod
    def from_env(cls) -> "S3Options":
        env = os.environ.get
        return cls(
            endpoint_url=env("AWS_ENDPOINT_URL_S3") or env("AWS_ENDPOINT_URL"),
            region=env("AWS_REGION") or env("AWS_DEFAULT_REGION"),
            key=env("AWS_ACCESS_KEY_ID"),
            secret=env("AWS_SECRET_ACCESS_KEY"),
        )

    def filesystem(self):
        import s3fs

        client_kwargs = {"region_name": self.region} if self.region else {}
        # Listings are not cached: another process (a Prefect worker) may have written since the last look.
        return s3fs.S3FileSystem(
            key=self.key,
            secret=self.secret,
            endpoint_url=self.endpoint_url,
            client_kwargs=client_kwargs,
            use_listings_cache=False,
            skip_instance_cache=True,
        )


class Store:
    """Parquet artifact tables under one root URL. Build with ``Store.from_url``."""

    def __init__(self, url: str, fs, root: str, protocol: str):
        self.url, self.fs, self.root, self.protocol = url, fs, root.rstrip("/"), protocol

    def __repr__(self) -> str:
        return f"Store({self.url!r})"

    @classmethod
    def from_url(cls, url: str | None = None, s3: S3Options | None = None) -> "Store":
        """A store for ``url`` (None: ``default_store_url()``): a local path, ``file://...`` or ``s3://bucket/prefix``."""
        url = url or default_store_url()
        parsed = urlparse(url)
        if parsed.scheme == "s3":
            if not parsed.netloc:
                raise ValueError(f"store URL {url!r} has no bucket; expected s3://bucket/prefix")
            root = f"{parsed.netloc}/{parsed.path.strip('/')}".rstrip("/")
            return cls(f"s3://{root}", (s3 or S3Options.from_env()).filesystem(), root, "s3")
        if parsed.scheme in ("", "file") or len(parsed.scheme) == 1:  # a Windows drive letter parses as a scheme
            path = Path(parsed.path if parsed.scheme == "file" else url).expanduser().resolve()
            return cls(str(path), fsspec.filesystem("file"), str(path), "file")
        raise ValueError(f"unsupported store URL {url!r}; expected a local path or s3://bucket/prefix")

    # -- addressing -------------------------------------------------------------------------------------------
    def uri_for(self, table: str, part: str = "data", **keys) -> str:
        """URI of one part file: ``<store>/<table>/<k>=<v>/.../<part>.parquet``; ``keys`` are exactly the table's
        partition columns (``run_id`` and ``round`` for run tables, ``dataset`` for prompts/anchors)."""
        return self._uri(self._rel(table, part, keys))

    def _rel(self, table: str, part: str, keys: dict) -> str:
        ts = spec(table)
        if set(keys) != set(ts.partition_by):
            raise ValueError(f"{table} is partitioned by {list(ts.partition_by)}; got {sorted(keys)}")
        _check_segment("part", part)
        segs = []
        for k in ts.partition_by:
            v = keys[k]
            if k == "round":
                if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                    raise ValueError(f"round must be a non-negative int, got {v!r}")
            else:
                _check_segment(k, v)
            segs.append(f"{k}={v}")
        return "/".join([table, *segs, f"{part}.parquet"])

    def _uri(self, rel: str) -> str:
        return f"{self.url}/{rel}"

    def _path(self, uri: str) -> str:
        """The filesystem path of a URI of this store (s3fs paths have no scheme)."""
        if not uri.startswith(self.url + "/"):
            raise ValueError(f"{uri!r} is not in store {self.url!r}")
        return f"{self.root}/{uri[len(self.url) + 1:]}"

    def table_glob(self, table: str) -> str:
        """A glob URI matching every part file of ``table`` (what the DuckDB views read)."""
        spec(table)
        return self._uri(f"{table}/**/*.parquet")

    # -- writing ----------------------------------------------------------------------------------------------
    def write(self, table: str, data, part: str = "data", **keys) -> str:
        """Write one step's rows as ``<table>/<keys>/<part>.parquet``, replacing that file if it exists; return its URI.

        data: pyarrow Table, polars or pandas DataFrame, or a list of row dicts with the table's columns
        (``dr_core.schemas``); partition columns may be omitted (they are filled from ``keys``) and, if present,
        must equal ``keys``.
        """
        rel = self._rel(table, part, keys)
        t = _with_keys(table, to_arrow(data), keys)
        t = conform(table, t)
        buf = pa.BufferOutputStream()
        pq.write_table(t, buf, compression="zstd")
        uri = self._uri(rel)
        self._put(self._path(uri), buf.getvalue().to_pybytes())
        return uri

    def _put(self, path: str, payload: bytes) -> None:
        if self.protocol == "file":
            _atomic_local_write(path, payload)
            return
        bucket = path.split("/", 1)[0]
        if not self.fs.exists(bucket):
            self.fs.mkdir(bucket)
        # pipe_file is one put_object, or (large files) a multipart upload completed after the last part: a
        # crashed upload is never visible and readers see the old file or the new one.
        self.fs.pipe_file(path, payload)

    # -- reading ----------------------------------------------------------------------------------------------
    def exists(self, uri: str) -> bool:
        return bool(self.fs.exists(self._path(uri)))

    def read(self, uri: str) -> pa.Table:
        """The rows of one part file (partition columns included)."""
        with self.fs.open(self._path(uri), "rb") as fh:
            return pq.ParquetFile(fh).read()

    def parts(self, table: str, **keys) -> list[str]:
        """Sorted URIs of ``table``'s part files, optionally restricted to leading partition ``keys``."""
        ts = spec(table)
        lead = ts.partition_by[: len(keys)]
        if set(keys) != set(lead):
            raise ValueError(f"{table}: filter on a leading subset of {list(ts.partition_by)}; got {sorted(keys)}")
        prefix = "/".join([f"{self.root}/{table}", *(f"{k}={keys[k]}" for k in lead)])
        if not self.fs.exists(prefix):
            return []
        found = self.fs.find(prefix)
        return sorted(self._uri(_strip_root(p, self.root)) for p in found if p.endswith(".parquet"))

    def read_table(self, table: str, **keys) -> pa.Table:
        """All rows of ``table`` (or of the partitions matching leading ``keys``); an empty table with the schema
        if nothing has been written."""
        tables = [self.read(u) for u in self.parts(table, **keys)]
        if not tables:
            return spec(table).schema.empty_table()
        return pa.concat_tables(tables, promote_options="default")

    def content_hash(self, uri: str) -> str:
        """``sha256:<hex>`` of the file's bytes: the same rows written again hash the same (cache keys)."""
        h = hashlib.sha256()
        with self.fs.open(self._path(uri), "rb") as fh:
            while chunk := fh.read(1 << 20):
                h.update(chunk)
        return f"sha256:{h.hexdigest()}"

    # -- DuckDB -----------------------------------------------------------------------------------------------
    def connect(self) -> duckdb.DuckDBPyConnection:
        """An in-memory DuckDB connection with one view per table (``anchors``, ``verdicts``...) over the store.

        The views read the files at query time, so parts written after ``connect()`` are seen; a table with no
        file yet is an empty view with the schema's columns (it stays empty for this connection).
        """
        con = duckdb.connect()
        if self.protocol != "file":
            # DuckDB's httpfs extension downloads at install time; the fsspec filesystem needs no extension.
            con.register_filesystem(self.fs)
        for name in TABLES:
            if self.parts(name):
                # union_by_name would read every file's footer before each query (slow on S3); all parts are
                # written through conform(), so they share the schema. A schema change needs old parts rewritten.
                glob = self.table_glob(name).replace("'", "''")
                con.execute(
                    f"CREATE VIEW {name} AS SELECT * FROM read_parquet('{glob}', union_by_name = false, "
                    "hive_partitioning = false)"
                )
            else:
                con.register(name, spec(name).schema.empty_table())
        return con


def _check_segment(what: str, value) -> None:
    if not isinstance(value, str) or not _SEGMENT.match(value):
        raise ValueError(f"{what} {value!r} must match {_SEGMENT.pattern} (it becomes a path segment)")


def _strip_root(path: str, root: str) -> str:
    path = path.replace("\\", "/")
    return path[len(root) + 1:] if path.startswith(root + "/") else path


def _with_keys(table: str, t: pa.Table, keys: dict) -> pa.Table:
    """Fill missing partition columns from ``keys``; refuse rows whose partition columns disagree with them."""
    for k, v in keys.items():
        if k in t.column_names:
            values = set(t.column(k).unique().to_pylist())
            if t.num_rows and values != {v}:
                raise ValueError(f"{table}: column {k} holds {sorted(map(str, values))}, but the file is {k}={v}")
        else:
            typ = spec(table).schema.field(k).type
            t = t.append_column(k, pa.array([v] * t.num_rows, typ))
    return t


def _atomic_local_write(path: str, payload: bytes) -> None:
    """Temp file in the target's directory, fsync, ``os.replace``: readers see the old file or the new, never a torn
    one. The temp name does not end in ``.parquet`` so the table globs never pick it up."""
    directory = os.path.dirname(path)
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=f".{os.path.basename(path)}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(payload)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    dir_fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(dir_fd)  # make the rename itself durable
    finally:
        os.close(dir_fd)
