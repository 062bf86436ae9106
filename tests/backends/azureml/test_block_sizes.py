"""The block size of an Azure Blob checkpoint write, chosen from the file's size: any file a block blob holds fits
its 50,000 blocks of at most 4000 MiB; a larger one is refused before anything is sent."""

from __future__ import annotations

import pytest

from cloudddp.backends.azureml.checkpoint_store import BLOCK_MOST, BLOCKS, block_size
from cloudddp.backends.checkpoints.store import CHUNK
from cloudddp.errors import CloudDDPError

GiB, TiB = 1 << 30, 1 << 40


@pytest.mark.parametrize("size", [0, 1, CHUNK, BLOCKS * CHUNK, 200 * GiB, 5 * TiB, BLOCKS * BLOCK_MOST])
def test_every_size_a_block_blob_holds_fits_its_block_count_in_blocks_it_takes(size: int) -> None:
    block = block_size(size)
    assert CHUNK <= block <= BLOCK_MOST and block % (1 << 20) == 0
    assert -(-size // block) <= BLOCKS


def test_blocks_stay_at_one_chunk_until_a_file_needs_larger_and_then_grow_by_the_least() -> None:
    assert block_size(BLOCKS * CHUNK) == CHUNK and block_size(None) == CHUNK  # up to 48.8 GiB, or untold
    assert block_size(200 * GiB) == 5 << 20  # 200 GiB / 50,000 = 4.1 MiB: 40,960 blocks of 5 MiB


def test_a_file_over_a_block_blobs_largest_is_refused_before_anything_is_sent() -> None:
    with pytest.raises(CloudDDPError, match="50000 blocks of at most 4194304000 bytes"):
        block_size(BLOCKS * BLOCK_MOST + 1)
