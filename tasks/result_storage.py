"""Where Prefect keeps the pipeline's task results and cache records (``<store>/_prefect/results``), written so that a
crash never leaves a torn one.

Prefect's own blocks write non-atomically: ``LocalFileSystem.write_path`` opens the target and writes into it, and
``RemoteFileSystem.write_path`` streams into an fsspec file. A process killed mid-write (SIGKILL, OOM, a lost node)
would leave a truncated record under its final name. Prefect treats a record it cannot parse as absent (a cache miss:
``ResultStore.exists`` catches the error, so the step is recomputed and the record rewritten), so a torn record costs
a recomputation, not a crash; these blocks make sure it cannot happen in the first place:

- ``AtomicLocalFileSystem`` (a local store): ``write_path`` goes through ``dr_core.store.atomic.write_atomic``, the
  store's own writer: a temp file beside the target (``.<key>.<random>.tmp``), fsynced, renamed over the target, the
  directory fsynced. Readers see the old record or the new one; a dead writer's temp file is swept by the next write
  into the directory. The ``result-write`` fault point (dr_core/faults.py) is half-way through the temp file's bytes.
- ``AtomicRemoteFileSystem`` (an S3 store): ``write_path`` is one ``pipe_file`` of the whole record: a single
  PutObject, or for a large body a multipart upload that becomes visible only when it is completed, never an open
  write stream that could commit a partial object.

Prefect accepts a block as a task's ``result_storage`` only once it is saved on the API server (``Task.__init__``
refuses an unsaved one), so ``storage_for`` saves it under a name derived from its base path (``dr-results-<hash>``;
the document holds no credentials: s3fs reads them from the environment at run time) and returns it. Saving also
registers the block type with the server (saved again if another process registered it at the same moment: Prefect
reads, then creates, so one of two concurrent first saves is refused). A process that reads a result through the
block's id (another process, a Ray worker) needs this module imported, which ``tasks.runtime`` does.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from prefect._internal.compatibility.async_dispatch import async_dispatch
from prefect.exceptions import ObjectAlreadyExists
from prefect.filesystems import LocalFileSystem, RemoteFileSystem
from prefect.utilities.asyncutils import run_sync_in_worker_thread

from dr_core.store.atomic import write_atomic

#: How many times ``storage_for`` saves its block when another process registers the same block type meanwhile.
SAVE_ATTEMPTS = 3
#: The dr_core.faults point half-way through a result's temp file (qualifier: the record's key, its file name).
FAULT_POINT = "result-write"

__all__ = ["FAULT_POINT", "AtomicLocalFileSystem", "AtomicRemoteFileSystem", "storage_for"]


class AtomicLocalFileSystem(LocalFileSystem):
    """``LocalFileSystem`` whose ``write_path`` replaces the file atomically (``dr_core.store.atomic``)."""

    _block_type_name = "DR Atomic Local File System"
    _block_type_slug = "dr-atomic-local-file-system"

    def _write_atomic(self, path: str, content: bytes) -> str:
        target: Path = self._resolve_path(path)
        if target.exists() and not target.is_file():
            raise ValueError(f"Path {target} already exists and is not a file.")
        write_atomic(target, bytes(content), fault=FAULT_POINT)
        return str(target)

    async def awrite_path(self, path: str, content: bytes) -> str:
        return await run_sync_in_worker_thread(self._write_atomic, path, content)

    @async_dispatch(awrite_path)
    def write_path(self, path: str, content: bytes) -> str:
        return self._write_atomic(path, content)


class AtomicRemoteFileSystem(RemoteFileSystem):
    """``RemoteFileSystem`` whose ``write_path`` is one ``pipe_file`` of the whole content (no open write stream)."""

    _block_type_name = "DR Atomic Remote File System"
    _block_type_slug = "dr-atomic-remote-file-system"

    def _write_whole(self, path: str, content: bytes) -> str:
        path = self._resolve_path(path)
        self.filesystem.makedirs(path[: path.rindex("/")], exist_ok=True)  # as RemoteFileSystem: no-op on S3
        self.filesystem.pipe_file(path, bytes(content))
        return path

    async def awrite_path(self, path: str, content: bytes) -> str:
        return await run_sync_in_worker_thread(self._write_whole, path, content)

    @async_dispatch(awrite_path)
    def write_path(self, path: str, content: bytes) -> str:
        return self._write_whole(path, content)


def storage_for(basepath: str | Path, settings: dict | None = None):
    """The saved result-storage block for ``basepath``: ``AtomicRemoteFileSystem`` for a URL with a scheme
    (``s3://...``; ``settings``: fsspec's options), ``AtomicLocalFileSystem`` for a local directory."""
    base = str(basepath)
    if "://" in base:
        block = AtomicRemoteFileSystem(basepath=base, settings=settings or {})
    else:
        block = AtomicLocalFileSystem(basepath=base)
    name = "dr-results-" + hashlib.sha256(str(block.basepath).encode()).hexdigest()[:12]
    for attempt in range(SAVE_ATTEMPTS):
        try:
            block.save(name, overwrite=True, _sync=True)  # explicit: also from an async caller
            return block
        except ObjectAlreadyExists:
            # Prefect registers a block type and schema by read-then-create: two processes saving at once on one
            # API server (two runs on one machine share its embedded server's database) both read "absent", and
            # the second create is refused. Saving again reads what the other process created.
            if attempt == SAVE_ATTEMPTS - 1:
                raise
    return block
