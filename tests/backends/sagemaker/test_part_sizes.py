"""The part size of an S3 checkpoint write, chosen from the file's size: any file S3 holds in one object fits its
10,000 parts of at most 5 GiB; a larger one is refused before anything is sent."""

from __future__ import annotations

import pytest

from cloudddp.backends.sagemaker.checkpoint_store import PART, PART_MOST, PARTS, part_size
from cloudddp.errors import CloudDDPError

GiB, TiB = 1 << 30, 1 << 40


@pytest.mark.parametrize("size", [0, 1, PART, PARTS * PART, 200 * GiB, 5 * TiB, PARTS * PART_MOST])
def test_every_size_s3_holds_fits_its_part_count_in_parts_it_takes(size: int) -> None:
    part = part_size(size)
    assert PART <= part <= PART_MOST and part % (1 << 20) == 0
    assert -(-size // part) <= PARTS


def test_parts_stay_at_16_mib_until_a_file_needs_larger_and_then_grow_by_the_least() -> None:
    assert part_size(PARTS * PART) == PART and part_size(None) == PART  # up to 156 GiB, or of untold size
    assert part_size(200 * GiB) == 21 << 20  # 200 GiB / 10,000 = 20.48 MiB: 9,753 parts of 21 MiB
    assert part_size(5 * TiB) == 525 << 20


def test_a_file_over_s3s_largest_object_is_refused_before_anything_is_sent() -> None:
    with pytest.raises(CloudDDPError, match="10000 parts of at most 5368709120 bytes"):
        part_size(PARTS * PART_MOST + 1)
