"""The transfer rule's measurements on the copy trio (H200) and the pageable/pinned pair (H100): the bytes
kineto records, pageable or pinned, synchronous or not, and the critical time compute does not hide."""

from __future__ import annotations

import pytest

from diagnose.model.config import Config
from diagnose.rulebook.engine import Context
from diagnose.rules.transfer import _measure

from conftest import load_capture


def _copies(name: str):
    return _measure(Context(load_capture(name), Config()))


def test_the_gpu_frame_keeps_each_copys_bytes_and_kernels_have_none():
    gpu = load_capture("transfer_pageable").gpu
    images = gpu[gpu["name"] == "Memcpy HtoD (Pageable -> Device)"]["bytes"]
    assert images.max() == 128 * 3 * 224 * 224 * 4  # the fp32 batch
    assert gpu.loc[gpu["cat"] == "kernel", "bytes"].isna().all()


@pytest.mark.parametrize("name", ["transfer_pageable", "transfer_pageable_h100"])
def test_pageable_blocking_copies_are_synchronous_and_on_the_critical_path(name):
    c = _copies(name)
    big = c.copies[c.copies["bytes"] > 1e6]
    assert (big["memory"] == "pageable").all() and big["synchronous"].all()
    assert (big["direction"] == "HtoD").all() and (big["element_bytes"] == 4).all()
    assert c.budget.share(c.critical_us) > 0.25


@pytest.mark.parametrize("name", ["transfer_pinned", "transfer_pinned_h100"])
def test_pinned_side_stream_copies_are_asynchronous_and_hidden_by_compute(name):
    c = _copies(name)
    big = c.copies[c.copies["bytes"] > 1e6]
    assert (big["memory"] == "pinned").all() and not big["synchronous"].any()
    assert c.budget.share(c.critical_us) < 0.05


def test_uint8_copies_move_one_byte_elements():
    c = _copies("transfer_uint8")
    assert (c.copies.loc[c.copies["bytes"] > 1e6, "element_bytes"] == 1).all()


def test_a_step_without_host_copies_has_none():
    c = _copies("matmul_bf16")
    assert not len(c.copies) and c.critical_us == 0.0
