"""The artifact store: Parquet tables (schemas in ``dr_core.store.schemas``) in a local directory or under ``s3://``.

A store is addressed by URL: a path (or ``file://`` URL) for a local directory, ``s3://bucket/prefix`` for object
storage through s3fs. S3 endpoint, region and keys come from the environment (``AWS_ENDPOINT_URL``,
``AWS_REGION``, ``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``) or from an explicit ``S3Options``
(``dr_core.store.s3``, with the budget of one S3 call); they are never printed, logged or written into artifacts
(``repr`` hides them). A store that cannot be used as asked raises ``StoreError`` (``dr_core.store.errors``).

One pipeline step writes one file: ``write(table, frame, part=step, run_id=..., round=...)`` returns the file's
URI at ``<store>/<table>/run_id=<run>/round=<round>/<step>.parquet``. Writes are atomic (local: temp file in the
same directory, fsync, ``os.replace``; S3: one PUT, or a multipart upload completed only once the whole file is
uploaded) and idempotent: writing the same step again replaces its file, so rows are never duplicated.

``connect()`` gives a DuckDB connection where every table is a view of that name over the store's files.

    python -c "from dr_core.store.artifacts import Store; print(Store.from_url('/tmp/st').connect().sql('FROM t'))"
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
from pathlib import Path
from urllib.parse import urlparse

import duckdb
import fsspec
import pyarrow as pa
import pyarrow.parquet as pq

from dr_core.constants import SEGMENT_PATTERN
from dr_core.paths import cache_dir, update_from_file
from dr_core.store import atomic, sql
from dr_core.store.errors import StoreError, short_cause
from dr_core.store.s3 import S3Options
from dr_core.store.schemas import TABLES, conform, spec, to_arrow

#: Tables whose DuckDB view matches columns by name: ``steps`` gained a column (``peak_rss_mb``), so a store holds
#: parts with and without it. Small files only: reading by name reads every part's footer first.
UNION_BY_NAME = frozenset({"steps"})

_SEGMENT = re.compile(SEGMENT_PATTERN)


#: Where shard parts live (``Store.write_shard``): beside the tables, outside every table's glob.
SHARDS_DIR = "_shards"


def default_store_url() -> str:
    """``$DR_STORE``, else a directory in the dynamicrubric cache (``~/.cache/dynamicrubric/store``)."""
    return os.environ.get("DR_STORE") or str(cache_dir() / "store")


class Store:
    """Parquet artifact tables under one root URL. Build with ``Store.from_url``."""

    def __init__(self, url: str, fs, root: str, protocol: str, s3: S3Options | None = None):
        self.url, self.fs, self.root, self.protocol = url, fs, root.rstrip("/"), protocol
        self.s3 = s3

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
            opts = s3 or S3Options.from_env()
            return cls(f"s3://{root}", opts.filesystem(), root, "s3", opts)
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
        return f"{self.root}/{uri[len(self.url) + 1 :]}"

    def table_glob(self, table: str) -> str:
        """A glob URI matching every part file of ``table`` (what the DuckDB views read)."""
        spec(table)
        return self._uri(f"{table}/**/*.parquet")

    def local_root(self) -> Path | None:
        """The store's directory for a local store; None for S3."""
        return Path(self.root) if self.protocol == "file" else None

    @property
    def endpoint_url(self) -> str | None:
        """The S3 endpoint the store talks to (its ``S3Options``, else the one s3fs resolved); None for a local
        store or the AWS default."""
        if self.protocol == "file":
            return None
        return (self.s3.endpoint_url if self.s3 else None) or getattr(self.fs, "endpoint_url", None)

    # -- writing ----------------------------------------------------------------------------------------------
    def write_shard(self, table: str, data, part: str, shard: int, shards: int, **keys) -> str:
        """Write one shard's rows of a step (dr_core/runs/shards.py), conformed to the table's schema like ``write``.
        The file is ``<store>/_shards/<table>/<keys>/<part>.shard-<i>-of-<n>.parquet``: outside the table's directory,
        so the DuckDB views never see a shard next to its merged part; kept after the merge (each shard task's cached
        result points at its file)."""
        if not (isinstance(shard, int) and isinstance(shards, int) and 0 <= shard < shards):
            raise ValueError(f"shard must be in [0, {shards}), got {shard!r}")
        rel = self._rel(table, f"{part}.shard-{shard}-of-{shards}", keys)
        return self._write_rel(f"{SHARDS_DIR}/{rel}", table, data, keys)

    def write(self, table: str, data, part: str = "data", **keys) -> str:
        """Write one step's rows as ``<table>/<keys>/<part>.parquet``, replacing that file if it exists; return its URI.

        data: pyarrow Table, polars or pandas DataFrame, or a list of row dicts with the table's columns
        (``dr_core.store.schemas``); partition columns may be omitted (they are filled from ``keys``) and, if present,
        must equal ``keys``.
        """
        return self._write_rel(self._rel(table, part, keys), table, data, keys)

    def _write_rel(self, rel: str, table: str, data, keys: dict) -> str:
        t = _with_keys(table, to_arrow(data), keys)
        t = conform(table, t)
        buf = pa.BufferOutputStream()
        pq.write_table(t, buf, compression="zstd")
        uri = self._uri(rel)
        self._put(self._path(uri), buf.getvalue().to_pybytes())
        return uri

    def _put(self, path: str, payload: bytes) -> None:
        if self.protocol == "file":
            try:
                _atomic_local_write(path, payload)
            except OSError as exc:
                raise StoreError(
                    f"cannot write {path}: {exc.strerror or exc} (the previous file, if any, is unchanged)"
                ) from exc
            return
        with self._errors(f"writing {path}"):
            if not self._bucket_exists():
                raise self._no_bucket()
            # pipe_file is one put_object, or (large files) a multipart upload completed after the last part: a
            # crashed upload is never visible and readers see the old file or the new one.
            self.fs.pipe_file(path, payload)

    def remove(self, uri: str) -> bool:
        """Delete one part file of this store (a writer's uncommitted part, e.g. the reward service's sweep of a
        batch that never wrote its commit part); False if it was not there."""
        path = self._path(uri)
        with self._errors(f"removing {uri}"):
            if not self.fs.exists(path):
                return False
            self.fs.rm_file(path)
            return True

    # -- checks before work, and S3 failures as one line ---------------------------------------------------
    @property
    def bucket(self) -> str | None:
        return self.root.split("/", 1)[0] if self.protocol == "s3" else None

    def _where(self) -> str:
        return f"S3 store {self.url} at {self.s3.endpoint if self.s3 else 'the default endpoint'}"

    def _no_bucket(self) -> StoreError:
        return StoreError(
            f"{self._where()}: bucket {self.bucket!r} does not exist; check the name, or create it with --create-bucket"
        )

    @contextlib.contextmanager
    def _errors(self, action: str):
        """S3 calls: any failure becomes one StoreError naming the store, endpoint, action and cause."""
        try:
            yield
        except StoreError:
            raise
        except Exception as exc:
            if self.protocol == "file":
                raise
            raise StoreError(f"{self._where()}: {action} failed: {short_cause(exc)}") from exc

    def _bucket_exists(self) -> bool:
        """HEAD the bucket. Unlike ``fs.exists(bucket)``, which answers False for an unreachable endpoint, this
        raises for anything but "no such bucket"."""
        try:
            self.fs.call_s3("head_bucket", Bucket=self.bucket)
            return True
        except FileNotFoundError:
            return False
        except Exception as exc:
            response = getattr(exc, "response", None)
            code = str(((response if isinstance(response, dict) else {}).get("Error") or {}).get("Code", ""))
            if code in ("404", "NoSuchBucket", "NotFound"):
                return False
            raise

    def require_exists(self) -> "Store":
        """For commands that read: StoreError unless the store holds something (a local directory with entries,
        an S3 bucket with objects under the prefix). A typo'd path or bucket must not look like an empty store."""
        if self.protocol == "file":
            root = Path(self.root)
            if not root.exists():
                raise StoreError(f"no store at {self.url}: the directory does not exist (check --store / DR_STORE)")
            if not root.is_dir():
                raise StoreError(f"store {self.url} is a file, not a directory")
            if not any(root.iterdir()):
                raise StoreError(f"store {self.url} is empty: nothing has been written to it yet")
            return self
        with self._errors("checking the bucket"):
            if not self._bucket_exists():
                raise self._no_bucket()
            if not self.fs.exists(self.root) or not self.fs.ls(self.root):
                raise StoreError(f"{self._where()}: nothing under {self.url} (check the prefix)")
        return self

    def check_writable(self, create_bucket: bool = False) -> "Store":
        """For commands that write, before any work: a local store is a directory (or can be made one); an S3
        bucket must exist, or is created when ``create_bucket`` (a typo'd bucket is never created silently)."""
        if self.protocol == "file":
            root = Path(self.root)
            if root.exists() and not root.is_dir():
                raise StoreError(f"store {self.url} is a file, not a directory")
            try:
                atomic.check_output_path(root / ".probe", "a file in the store")
            except OSError as exc:
                raise StoreError(f"store {self.url} cannot be written: {exc}") from None
            return self
        with self._errors("checking the bucket"):
            if not self._bucket_exists():
                if not create_bucket:
                    raise self._no_bucket()
                self.fs.mkdir(self.bucket)
        return self

    # -- reading ----------------------------------------------------------------------------------------------
    def exists(self, uri: str) -> bool:
        with self._errors(f"looking up {uri}"):
            return bool(self.fs.exists(self._path(uri)))

    def read(self, uri: str) -> pa.Table:
        """The rows of one part file (partition columns included)."""
        with self._errors(f"reading {uri}"), self.fs.open(self._path(uri), "rb") as fh:
            return pq.ParquetFile(fh).read()

    def parts(self, table: str, **keys) -> list[str]:
        """Sorted URIs of ``table``'s part files, optionally restricted to leading partition ``keys``."""
        ts = spec(table)
        lead = ts.partition_by[: len(keys)]
        if set(keys) != set(lead):
            raise ValueError(f"{table}: filter on a leading subset of {list(ts.partition_by)}; got {sorted(keys)}")
        prefix = "/".join([f"{self.root}/{table}", *(f"{k}={keys[k]}" for k in lead)])
        with self._errors(f"listing {table}"):
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
        with self._errors(f"reading {uri}"), self.fs.open(self._path(uri), "rb") as fh:
            return f"sha256:{update_from_file(hashlib.sha256(), fh).hexdigest()}"

    # -- DuckDB -----------------------------------------------------------------------------------------------
    def connect(self) -> duckdb.DuckDBPyConnection:
        """An in-memory DuckDB connection with one view per table over the store, confined to this store's files.
        The views are named as the tables (``anchors``, ``verdicts``...); DuckDB's own configuration does the
        confining (``confine``).

        The views read the files at query time, so parts written after ``connect()`` are seen; a table with no
        file yet is an empty view with the schema's columns (it stays empty for this connection).
        """
        con = duckdb.connect(config={"autoinstall_known_extensions": False, "autoload_known_extensions": False})
        if self.protocol != "file":
            # DuckDB's httpfs extension downloads at install time; the fsspec filesystem needs no extension.
            con.register_filesystem(self.fs)
        literal_paths = any(c in self.root for c in "*?[]{}")  # glob syntax in the store's own path
        for name in TABLES:
            parts = self.parts(name)
            if parts:
                # union_by_name would read every file's footer before each query (slow on S3); all parts are
                # written through conform(), so they share the schema. A schema change needs old parts rewritten,
                # except in the small steps table, which gained a column (peak_rss_mb) and is read by name.
                # A root with glob characters in it cannot be globbed: its views list today's files instead.
                source = (
                    ("[" + ", ".join(sql.quote(p) for p in parts) + "]")
                    if literal_paths
                    else sql.quote(self.table_glob(name))
                )
                try:
                    by_name = "true" if name in UNION_BY_NAME else "false"
                    con.execute(
                        f"CREATE VIEW {name} AS SELECT * FROM read_parquet({source}, union_by_name = {by_name}, "
                        "hive_partitioning = false)"
                    )
                except duckdb.Error as exc:
                    raise StoreError(
                        f"store {self.url}: table {name} cannot be read ({short_cause(exc)}); a part file "
                        "is corrupt or not one of this table's: rewrite it (re-run its step) or "
                        "remove it"
                    ) from None
            else:
                con.register(name, spec(name).schema.empty_table())
        return self.confine(con)

    def allowed_directories(self) -> list[str]:
        """The directories a connection of this store may touch: the store's root only (both spellings DuckDB
        uses for a registered filesystem's paths)."""
        if self.protocol == "file":
            return [self.root + "/"]
        return [f"s3://{self.root}/", f"s3:///{self.root}/"]

    def confine(self, con: duckdb.DuckDBPyConnection) -> duckdb.DuckDBPyConnection:
        """Lock ``con`` to this store: external access off except ``allowed_directories()`` (no other file, no
        URL, no ATTACH, no extension install or load), then ``lock_configuration`` so no statement can undo it."""
        return sql.confine(con, self.allowed_directories())

    # -- files that are not tables (anchor files dropped under a prefix) --------------------------------------
    def files_under(self, prefix: str, suffix: str = "") -> list[str]:
        """Sorted URIs of the files under ``<store>/<prefix>`` whose names end with ``suffix`` ([] if none)."""
        root = f"{self.root}/{prefix.strip('/')}"
        with self._errors(f"listing {prefix}"):
            found = self.fs.find(root) if self.fs.exists(root) else []
        return sorted(self._uri(_strip_root(p, self.root)) for p in found if p.endswith(suffix))

    def read_bytes(self, uri: str) -> bytes:
        """The bytes of one file of this store."""
        with self._errors(f"reading {uri}"):
            return self.fs.cat_file(self._path(uri))


def _check_segment(what: str, value) -> None:
    if not isinstance(value, str) or not _SEGMENT.match(value):
        raise ValueError(f"{what} {value!r} must match {_SEGMENT.pattern} (it becomes a path segment)")


def _strip_root(path: str, root: str) -> str:
    path = path.replace("\\", "/")
    return path[len(root) + 1 :] if path.startswith(root + "/") else path


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
    """``dr_core.store.atomic.write_atomic``: temp file beside the target (never matched by ``*.parquet``), flock,
    fsync,
    umask's mode, ``os.replace``; stale temp files of dead writers in the directory are swept first. The
    ``store-write`` fault point (dr_core/faults.py) is half-way through the bytes."""
    atomic.write_atomic(path, payload, fault="store-write")
