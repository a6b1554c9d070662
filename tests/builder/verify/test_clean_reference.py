"""The clean references' cache: how many references a stream computes, and what it keeps on the disk (the
reference child itself is replaced by one that writes a file of a known size)."""

from __future__ import annotations

import gc
import shutil
from collections import namedtuple
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from builder import config
from builder.tasks import load_suite
from builder.verify.engine import clean_reference
from builder.verify.engine.clean_reference import CleanReference, ReferenceCache
from builder.verify.options import VerifyOptions
from builder.verify.protocol import tensor_files

REFERENCE_BYTES = 1000


@pytest.fixture
def computed(monkeypatch):
    """The tasks whose reference was computed, in order; each reference's files hold REFERENCE_BYTES."""
    tasks: list[str] = []

    def fake_compute(task, options, directory, cancel=None):
        directory.mkdir(parents=True, exist_ok=True)
        (directory / "outputs.safetensors").write_bytes(b"\0" * REFERENCE_BYTES)
        tasks.append(task.id)
        return CleanReference(manifest={"task": task.id})

    monkeypatch.setattr(clean_reference, "compute_clean_reference", fake_compute)
    usage = namedtuple("usage", "total used free")
    plenty = usage(1 << 50, 0, 1 << 50)  # whatever this machine's disk has free
    monkeypatch.setattr(clean_reference.shutil, "disk_usage", lambda path: plenty)
    return tasks


@pytest.fixture(scope="module")
def tasks():
    return list(load_suite().tasks)[:24]


@pytest.fixture
def options():
    return VerifyOptions(backend="cpu").with_seeds()


def rounds(cache, tasks, options, times):
    """Every task's reference, `times` over in turn: an RL loop scoring one sample a task each round."""
    return [cache.get(task, options) for _ in range(times) for task in tasks]


def test_a_stream_that_comes_back_to_24_tasks_computes_each_reference_once(computed, tasks, options):
    cache = ReferenceCache()
    got = rounds(cache, tasks, options, 3)
    assert sorted(computed) == sorted(t.id for t in tasks)
    assert [r.manifest["task"] for r in got] == [t.id for t in tasks] * 3
    assert all(r.file_bytes == REFERENCE_BYTES for r in got)


def test_references_past_the_byte_bound_are_dropped_oldest_first_and_computed_again(computed, tasks, options):
    cache = ReferenceCache(capacity_bytes=2 * REFERENCE_BYTES + 1)  # room for two
    first, second, third = tasks[:3]
    for task in (first, second, third):
        cache.get(task, options)
    cache.get(third, options)  # held
    cache.get(second, options)  # held
    assert computed == [first.id, second.id, third.id]
    cache.get(first, options)  # dropped when the third came: computed again, and drops the third (least recent)
    cache.get(third, options)
    assert computed == [first.id, second.id, third.id, first.id, third.id]


def test_a_disk_short_of_free_space_keeps_only_the_newest_reference(computed, tasks, options, monkeypatch):
    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(clean_reference.shutil, "disk_usage", lambda path: usage(10, 10, 0))  # after the fixture's
    cache = ReferenceCache(min_free_bytes=1)
    for task in tasks[:3]:
        assert cache.get(task, options).error is None  # its candidates still get it
    cache.get(tasks[2], options)
    cache.get(tasks[0], options)
    assert computed == [t.id for t in tasks[:3]] + [tasks[0].id]


def test_no_reference_is_computed_ahead_of_need_on_a_disk_short_of_free_space(computed, tasks, options, monkeypatch):
    usage = namedtuple("usage", "total used free")
    cache = ReferenceCache(min_free_bytes=100)
    with ThreadPoolExecutor(1) as warmers:
        cache.prewarm(tasks[0], options, warmers)
        monkeypatch.setattr(clean_reference.shutil, "disk_usage", lambda path: usage(100, 1, 99))
        cache.prewarm(tasks[1], options, warmers)
    assert computed == [tasks[0].id]  # the second waits for a kernel that needs it
    assert cache.get(tasks[1], options).error is None and computed == [tasks[0].id, tasks[1].id]


def test_the_count_bound_still_holds(computed, tasks, options):
    cache = ReferenceCache(capacity=2)
    rounds(cache, tasks[:3], options, 2)
    assert len(computed) == 6  # three tasks in turn through room for two: every one computed again


def test_a_dropped_references_files_go_once_no_evaluation_holds_it(computed, tasks, options):
    cache = ReferenceCache(capacity=1)
    held = cache.get(tasks[0], options)
    directory = cache.root / ReferenceCache.key(tasks[0], options)[:24]
    cache.get(tasks[1], options)  # drops the first from the cache
    gc.collect()
    assert directory.is_dir()  # an evaluation still judges from it
    del held
    gc.collect()
    assert not directory.exists()
    cache.close()
    assert not cache.root.exists()
    shutil.rmtree(cache.root, ignore_errors=True)


def test_a_filesystem_in_memory_is_told_by_the_mount_with_the_longest_prefix(monkeypatch):
    mount = namedtuple("mount", "device mountpoint fstype opts")
    mounts = [mount("/dev/vda", "/", "ext4", ""), mount("tmpfs", "/tmp", "tmpfs", ""),
              mount("/dev/vdb", "/tmp/disk", "xfs", ""), mount("tmpfs", "/tmpfiles", "tmpfs", "")]  # fmt: skip
    monkeypatch.setattr(clean_reference.psutil, "disk_partitions", lambda all: mounts)
    assert clean_reference.in_memory(Path("/tmp/ka-references-x"))
    assert not clean_reference.in_memory(Path("/tmp/disk/ka-references-x"))
    assert not clean_reference.in_memory(Path("/tmpx/ka-references-x"))  # a prefix of the name, not the path
    assert clean_reference.in_memory(Path("/tmp"))


def test_references_in_memory_hold_a_share_of_it_at_most(monkeypatch):
    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(clean_reference.shutil, "disk_usage", lambda path: usage(1 << 50, 0, 1 << 50))
    memory = namedtuple("memory", "total")
    monkeypatch.setattr(clean_reference.psutil, "virtual_memory", lambda: memory(64 << 30))
    monkeypatch.setattr(clean_reference, "in_memory", lambda path: True)
    assert ReferenceCache().capacity_bytes == int((64 << 30) * config.REFERENCE_CACHE_MEMORY_SHARE)
    monkeypatch.setattr(clean_reference, "in_memory", lambda path: False)
    assert ReferenceCache().capacity_bytes == config.REFERENCE_CACHE_BYTES


def test_references_on_a_disk_hold_a_share_of_its_free_space_and_an_engine_among_n_a_nth_of_that(monkeypatch):
    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(clean_reference.shutil, "disk_usage", lambda path: usage(100 << 30, 36 << 30, 64 << 30))
    monkeypatch.setattr(clean_reference, "in_memory", lambda path: False)
    share = config.REFERENCE_CACHE_DISK_SHARE
    assert ReferenceCache().capacity_bytes == int((64 << 30) * share) < config.REFERENCE_CACHE_BYTES
    assert ReferenceCache(disk_share=0.25).capacity_bytes == int((64 << 30) * share * 0.25)


def test_a_reference_being_computed_reserves_room_for_as_much_as_the_largest_held(computed, tasks, options,
                                                                                    monkeypatch):  # fmt: skip
    cache = ReferenceCache()
    asked = []
    reserved = cache.room.reserved

    def spy(nbytes):
        asked.append(nbytes)
        return reserved(nbytes)

    monkeypatch.setattr(cache.room, "reserved", spy)
    cache.get(tasks[0], options)
    cache.get(tasks[1], options)
    assert asked == [0, REFERENCE_BYTES] and cache.scratch_bytes(cache.get(tasks[1], options)) == int(
        REFERENCE_BYTES * config.EVAL_SCRATCH_OVER_REFERENCE
    )


def test_a_mount_table_that_cannot_be_read_leaves_the_byte_bound(monkeypatch):
    def unreadable(all):
        raise PermissionError("/proc/self/mounts")

    monkeypatch.setattr(clean_reference.psutil, "disk_partitions", unreadable)
    assert not clean_reference.in_memory(Path("/tmp"))


@pytest.fixture
def written(monkeypatch):
    """Like `computed`, with references a candidate is judged from: real output files, read as the judge reads
    them (`tensor_files.read`: a file with a second link is refused)."""
    tasks: list[str] = []

    def fake_compute(task, options, directory, cancel=None):
        tensor_files.write_dir(directory, {"trial0": torch.full((4, 4), float(len(tasks)))})
        tasks.append(task.id)
        outputs = tensor_files.OutputsDir(directory, config.REFERENCE_FILE_MAX_BYTES, keep_loaded=False)
        return CleanReference(outputs=outputs, manifest={"task": task.id})

    monkeypatch.setattr(clean_reference, "compute_clean_reference", fake_compute)
    return tasks


def judged_value(reference: CleanReference) -> torch.Tensor:
    value = reference.outputs.get("trial0")
    assert not isinstance(value, str), value  # a description: the judge would fail every candidate on it
    return value[0].tensor


def test_an_engine_adopts_the_reference_another_shares_and_computes_none(written, tasks, options):
    giver, taker = ReferenceCache(), ReferenceCache()
    giver.get(tasks[1], options)
    giver.get(tasks[0], options)
    offer = giver.share(tasks[0], options)
    assert offer is not None and Path(offer.directory).name.startswith(config.REFERENCE_SHARE_PREFIX)
    assert taker.adopt(tasks[0], options, offer)
    assert not Path(offer.directory).exists()  # moved into the taker's cache
    reference = taker.get(tasks[0], options)
    assert written == [tasks[1].id, tasks[0].id]  # computed by the giver alone
    assert (taker.adopted, taker.computed) == (1, 0)
    assert reference.manifest == {"task": tasks[0].id}
    assert reference.outputs.directory.parent == taker.root
    assert torch.equal(judged_value(reference), torch.full((4, 4), 1.0))
    assert torch.equal(judged_value(giver.get(tasks[0], options)), torch.full((4, 4), 1.0))  # the giver's own
    again = giver.share(tasks[0], options)
    assert not taker.adopt(tasks[0], options, again) and Path(again.directory).is_dir()  # held already: not moved
    shutil.rmtree(again.directory)
    giver.close()
    assert torch.equal(judged_value(reference), torch.full((4, 4), 1.0))  # the taker's files are its own
    assert reference.file_bytes == sum(f.stat().st_size for f in reference.outputs.directory.iterdir())
    taker.close()


def test_a_reference_under_another_key_is_computed_not_adopted(written, tasks, options):
    giver, taker = ReferenceCache(), ReferenceCache()
    giver.get(tasks[0], options)
    offer = giver.share(tasks[0], options)
    other_seeds = VerifyOptions(backend="cpu").with_seeds()  # another build's trials (or GPU model, or torch)
    assert not taker.adopt(tasks[0], other_seeds, offer)
    assert not taker.adopt(tasks[1], options, offer)  # another task
    taker.get(tasks[0], other_seeds)
    assert written == [tasks[0].id, tasks[0].id]
    for cache in (giver, taker):
        cache.close()
    shutil.rmtree(offer.directory)


@pytest.mark.parametrize("change", ["added", "shortened", "gone", "elsewhere"])
def test_shared_files_other_than_those_shared_leave_the_reference_to_be_computed(
    written, tasks, options, change, tmp_path
):
    giver, taker = ReferenceCache(), ReferenceCache()
    giver.get(tasks[0], options)
    offer = giver.share(tasks[0], options)
    shared = Path(offer.directory)
    if change == "added":
        (shared / "probe.safetensors").write_bytes(b"\0")
    elif change == "shortened":
        (shared / "trial0.safetensors").write_bytes(b"\0")
    elif change == "gone":
        shutil.rmtree(shared)  # the stream ended before the pair reached the taker
    else:
        offer = replace(offer, directory=str(tmp_path))  # not a directory `share` made
    assert not taker.adopt(tasks[0], options, offer)
    assert not any(taker.root.iterdir())  # nothing half-moved is left behind
    taker.get(tasks[0], options)
    assert (taker.adopted, taker.computed) == (0, 1)
    assert tmp_path.is_dir()
    for cache in (giver, taker):
        cache.close()
    shutil.rmtree(shared, ignore_errors=True)


def test_nothing_is_shared_of_a_reference_not_held_or_failed(computed, tasks, options):
    cache = ReferenceCache()
    assert cache.share(tasks[0], options) is None  # never computed here
    cache.get(tasks[0], options)  # the `computed` fixture's references carry no outputs to judge from
    assert cache.share(tasks[0], options) is None
    cache.close()
