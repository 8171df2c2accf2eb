"""Two runs on one machine save their result-storage blocks at once (tasks/result_storage.py::storage_for): Prefect
registers a block type by read-then-create, so the process that read "absent" just before the other one created it
is refused (``ObjectAlreadyExists``, as ``test_concurrent_runs.py`` once saw); ``storage_for`` saves again. On the
session's real Prefect API, the refusal is made the real way: the type exists and this process's read is made
stale, so its create is the server's own 409."""

from __future__ import annotations

import pytest
from prefect.client.orchestration._blocks_types.client import BlocksTypeClient
from prefect.exceptions import ObjectAlreadyExists, ObjectNotFound

from tasks import result_storage
from tasks.result_storage import storage_for


def _stale_reads(monkeypatch, n: int) -> list[str]:
    """The first ``n`` reads of a block type by slug answer "absent", as they did for a process that read just
    before another process created it; later reads see the server."""
    real, reads = BlocksTypeClient.read_block_type_by_slug, []

    def read(self, slug):
        reads.append(slug)
        if len(reads) <= n:
            raise ObjectNotFound(http_exc=RuntimeError(f"{slug}: read before the other process created it"))
        return real(self, slug)

    monkeypatch.setattr(BlocksTypeClient, "read_block_type_by_slug", read)
    return reads


def test_a_block_type_another_process_registered_meanwhile_is_saved_again(prefect_harness, tmp_path, monkeypatch):
    storage_for(tmp_path / "first")  # the block type and schema are on the server now
    reads = _stale_reads(monkeypatch, 1)
    block = storage_for(tmp_path / "second")
    assert reads == ["dr-atomic-local-file-system"] * 2  # refused once (the server's 409), then read and saved
    assert block._block_document_id is not None and block._block_document_name.startswith("dr-results-")
    block.write_path("k", b"record")
    assert block.read_path("k") == b"record"


def test_it_gives_up_after_its_attempts(prefect_harness, tmp_path, monkeypatch):
    storage_for(tmp_path / "first")
    reads = _stale_reads(monkeypatch, result_storage.SAVE_ATTEMPTS)
    with pytest.raises(ObjectAlreadyExists):
        storage_for(tmp_path / "third")
    assert len(reads) == result_storage.SAVE_ATTEMPTS
