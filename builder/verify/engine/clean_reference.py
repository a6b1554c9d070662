"""Clean references (trusted parent side): the reference child (mode "reference") run once per task, seed set
and tolerance, and the cache every candidate of the task is judged from.

The child's output files stay in a directory private to the parent, never bound into a candidate's sandbox. An
engine that hands pairs back to another engine of the same build (`hand_back`) shares a copy of their tasks'
references (`share`), which the taker adopts (`adopt`) where its own key is the same, rather than run the child
again.
"""

from __future__ import annotations

import hashlib
import json
import logging
import shutil
import tempfile
import threading
import time
import weakref
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import psutil

from builder import config
from builder.tasks import Task
from builder.verify import environment, milestones
from builder.verify.engine import disk_room
from builder.verify.engine.children import build_job, run_in_turn
from builder.verify.judge.referee import choose_timed_samples
from builder.verify.protocol import tensor_files
from builder.verify.protocol.plan import job_counts, public_manifest, timing_seeds
from builder.verify.sandbox.process import SandboxCancelled
from builder.verify.sandbox.suspects import suspect_text

if TYPE_CHECKING:
    from builder.verify.options import VerifyOptions

log = logging.getLogger(__name__)


@dataclass
class CleanReference:
    """The clean reference child's outputs (unpacked, CPU) and manifest, or why there are none."""

    outputs: Any = None  # tensor_files.OutputsDir (or a dict of unpacked values)
    manifest: dict[str, Any] = field(default_factory=dict)
    error: str | None = None
    origin: str = "task"  # who failed: the task's code, or the child (crash, timeout)
    compute_s: float = 0.0
    file_bytes: int = 0  # what its files hold on the disk (the cache's bound)
    owner: Any = field(default=None, repr=False)  # the cache whose directory holds the files: kept alive with them

    def public_manifest(self) -> dict[str, Any]:
        return public_manifest(self.manifest)

    def file_limit(self) -> int:
        """The most bytes one of a candidate's output files may hold: one call's outputs, with room to spare."""
        per_call = sum(int(n) for n in self.manifest.get("output_bytes") or [])
        return 2 * per_call + config.OUTPUTS_FILE_SLACK_BYTES


@dataclass(frozen=True)
class SharedReference:
    """A clean reference one engine shares with another of the same build (`ReferenceCache.share`): its cache key,
    the directory holding a copy of its files (names and sizes in `files`), and its manifest."""

    key: str
    directory: str
    files: dict[str, int]
    manifest: dict[str, Any]


class ReferenceCache:
    """Clean references of the tasks in use, computed once each (per build: the seeds are the build's).

    Kept as files, the least recently used dropped first: once more than `capacity` are held, their files hold
    more than `capacity_bytes`, or the disk they are on has less than `min_free_bytes` free. The newest is always
    kept (its candidates wait for it). Their files hold at most `REFERENCE_CACHE_DISK_SHARE` of `disk_share` of
    the disk's free space as the cache starts: the evaluation children write their outputs beside them, each once
    `room` has space for it (`disk_room.py`). Where the files live in memory (a tmpfs /tmp), they hold at most
    `REFERENCE_CACHE_MEMORY_SHARE` of the machine's memory: the children need the rest."""

    def __init__(self, capacity: int = config.REFERENCE_CACHE_TASKS, capacity_bytes: int = config.REFERENCE_CACHE_BYTES,
                 min_free_bytes: int = config.REFERENCE_CACHE_MIN_FREE_BYTES, disk_share: float = 1.0) -> None:  # fmt: skip
        self.capacity, self.capacity_bytes, self.min_free_bytes = capacity, capacity_bytes, min_free_bytes
        # Private to this process: never bound into a candidate's sandbox.
        self.root = Path(tempfile.mkdtemp(prefix="ka-references-"))
        self.room = disk_room.DiskRoom(self.root.parent, disk_share)  # the evaluation children's scratch is beside it
        on_disk = int(disk_room.free_bytes(self.root) * config.REFERENCE_CACHE_DISK_SHARE * self.room.share)
        self.capacity_bytes = min(self.capacity_bytes, on_disk)
        if in_memory(self.root):
            memory = psutil.virtual_memory().total
            self.capacity_bytes = min(self.capacity_bytes, int(memory * config.REFERENCE_CACHE_MEMORY_SHARE))
        self._finalizer = weakref.finalize(self, shutil.rmtree, str(self.root), True)
        self._entries: OrderedDict[str, CleanReference] = OrderedDict()
        self._locks: dict[str, threading.Lock] = {}
        self._lock = threading.Lock()
        self.largest_bytes = 0  # the largest reference's files held so far: what the next one reserves
        self.computed = 0
        self.adopted = 0  # references taken from another engine's `share`, not computed here
        self.compute_s = 0.0  # wall seconds of the reference children run so far
        self.ready_at: list[float] = []  # time.monotonic() as each was ready (the bench's view of a start)
        self.first_ended = threading.Event()  # set once a reference child has ended, ready or failed
        self._warming: set[str] = set()

    @staticmethod
    def key(task: Task, options: VerifyOptions) -> str:
        atol, rtol = task.tolerances()
        env = environment.environment_fields(options.backend, options.device_index)
        material = [task.source, options.backend, env["gpu_name"], env["torch_version"], list(options.seeds or []),
                    options.atol if options.atol is not None else atol,
                    options.rtol if options.rtol is not None else rtol, options.trials]  # fmt: skip
        return hashlib.sha256(json.dumps(material).encode()).hexdigest()

    def get(self, task: Task, options: VerifyOptions, cancel: threading.Event | None = None) -> CleanReference:
        key = self.key(task, options)
        with self._lock:
            lock = self._locks.setdefault(key, threading.Lock())
        with lock:  # one computation per task, while other tasks' candidates go on
            with self._lock:
                if key in self._entries:
                    self._entries.move_to_end(key)
                    return self._entries[key]
            directory = self.root / key[:24]
            milestones.mark("first_reference_started")  # against first_window_received: when the first one began
            try:
                # Its files are not known before it ends: it reserves as much room as the largest held so far.
                with self.room.reserved(self.largest_bytes):
                    reference = compute_clean_reference(task, options, directory, cancel)
            finally:
                self.first_ended.set()
            self.computed += 1
            self.compute_s += reference.compute_s
            self.ready_at.append(time.monotonic())
            milestones.mark("first_reference_ready")
            if reference.error and suspect_text(reference.error):  # the machinery's, perhaps: asked again next time
                shutil.rmtree(directory, ignore_errors=True)
                return reference
            return self._hold(key, reference, directory, _bytes_under(directory))

    def _hold(self, key: str, reference: CleanReference, directory: Path, file_bytes: int) -> CleanReference:
        """Keep a reference whose files are in `directory` (computed here, or adopted): the files live as long as
        it does, and it counts against the cache's bounds."""
        weakref.finalize(reference, shutil.rmtree, str(directory), True)
        reference.owner, reference.file_bytes = self, file_bytes
        with self._lock:
            self.largest_bytes = max(self.largest_bytes, file_bytes)
            self._entries[key] = reference
            self._evict()
        return reference

    def _evict(self) -> None:
        """Drop the least recently used while a bound is passed (under the lock). A dropped one's files go once
        no evaluation holds it any more: counted as freed here, or a full disk would drop every entry."""
        held = sum(r.file_bytes for r in self._entries.values())
        free = shutil.disk_usage(self.root).free
        while len(self._entries) > 1 and (len(self._entries) > self.capacity or held > self.capacity_bytes
                                          or free < self.min_free_bytes):  # fmt: skip
            _, dropped = self._entries.popitem(last=False)
            held, free = held - dropped.file_bytes, free + dropped.file_bytes
            log.debug("clean reference dropped from the cache (%d bytes): %d held", dropped.file_bytes, held)

    def scratch_bytes(self, reference: CleanReference) -> int:
        """The room an evaluation child against `reference` reserves for its outputs."""
        return int(reference.file_bytes * config.EVAL_SCRATCH_OVER_REFERENCE)

    def prewarm(self, task: Task, options: VerifyOptions, executor: Any, cancel: threading.Event | None = None) -> None:
        """Compute the task's reference now, in a parallel child, rather than when its first candidate reaches
        an evaluation worker (which would wait for it): a build's first compiles leave the device idle. Only
        while the cache has room, so nothing computed early is dropped before it is used, and while its disk has
        more than `min_free_bytes` free: a build of many tasks would otherwise fill a small disk with references
        computed ahead of need, and the ones a kernel waits for would fail."""
        key = self.key(task, options)
        with self._lock:
            full = len(self._entries) + len(self._warming) >= self.capacity
            full = full or sum(r.file_bytes for r in self._entries.values()) >= self.capacity_bytes
            full = full or shutil.disk_usage(self.root).free < self.min_free_bytes
            if key in self._entries or key in self._warming or full:
                return
            self._warming.add(key)
        executor.submit(self._warm, task, options, key, cancel)

    def _warm(self, task: Task, options: VerifyOptions, key: str, cancel: threading.Event | None) -> None:
        try:
            self.get(task, options, cancel)
        except SandboxCancelled:
            pass  # the build is stopping
        except Exception as exc:  # noqa: BLE001 - an early start is an optimisation; get() reports failures
            log.warning("reference of task %s, computed early, failed: %s", task.id, exc)
        finally:
            with self._lock:
                self._warming.discard(key)

    def share(self, task: Task, options: VerifyOptions) -> SharedReference | None:
        """The task's reference, ready here, for one other engine of the same build to `adopt`: a copy of its
        files in a new directory beside this cache's (it outlives this cache; whoever passes the offer on removes
        it once the stream ends, unless the taker moved it into its own cache), its key and manifest. Copies, not
        links: the judge reads only files with a single link (`tensor_files.read`). None where there is none to
        share: not computed here, failed, or dropped."""
        key = self.key(task, options)
        with self._lock:
            reference = self._entries.get(key)  # held while its files are copied: they go only once it goes
        if reference is None or reference.error or not isinstance(reference.outputs, tensor_files.OutputsDir):
            return None
        directory = Path(tempfile.mkdtemp(prefix=config.REFERENCE_SHARE_PREFIX, dir=self.root.parent))
        try:
            files = _copy_files(reference.outputs.directory, directory)
        except OSError as exc:
            shutil.rmtree(directory, ignore_errors=True)
            log.debug("reference of task %s not shared: %s", task.id, exc)
            return None
        return SharedReference(key=key, directory=str(directory), files=files, manifest=reference.manifest)

    def adopt(self, task: Task, options: VerifyOptions, offer: SharedReference) -> bool:
        """Take the task's reference from another engine's `share` instead of running the reference child: only
        for this cache's own key (the same task, GPU model, torch, seeds and tolerances), while it holds none
        and computes none. The shared directory is moved into this cache's and read as a reference computed
        here would be; files other than those shared leave the reference to be computed here."""
        key = self.key(task, options)
        if not isinstance(offer, SharedReference) or offer.key != key:
            return False
        with self._lock:
            lock = self._locks.setdefault(key, threading.Lock())
        if not lock.acquire(blocking=False):  # being computed here already
            return False
        try:
            with self._lock:
                if key in self._entries:
                    return False
            directory = self.root / key[:24]
            shutil.rmtree(directory, ignore_errors=True)
            try:
                shared = Path(offer.directory)
                if shared.is_symlink() or not shared.name.startswith(config.REFERENCE_SHARE_PREFIX):
                    raise OSError(f"{shared} is no shared reference")
                shutil.move(shared, directory)  # a rename on one filesystem: each file keeps its single link
                files = {path.name: path.lstat().st_size for path in directory.iterdir()}
                if files != offer.files:
                    raise tensor_files.OutputFileError(f"files {files}, where {offer.files} were shared")
                outputs = tensor_files.OutputsDir(directory, config.REFERENCE_FILE_MAX_BYTES, keep_loaded=False)
            except (OSError, tensor_files.OutputFileError) as exc:
                shutil.rmtree(directory, ignore_errors=True)
                log.debug("reference of task %s not adopted: %s", task.id, exc)
                return False
            self.adopted += 1
            self._hold(key, CleanReference(outputs=outputs, manifest=dict(offer.manifest)), directory,
                       sum(files.values()))  # fmt: skip
            self.first_ended.set()
            return True
        finally:
            lock.release()

    def close(self) -> None:
        self._finalizer()


_process_cache: ReferenceCache | None = None
_process_cache_lock = threading.Lock()


def process_reference_cache() -> ReferenceCache:
    """One cache for callers that bring none (the CLI's verify, a Ray worker's evaluations): a worker that
    evaluates many candidates of a task computes its clean reference once (the key holds the seeds)."""
    global _process_cache
    with _process_cache_lock:
        if _process_cache is None:
            _process_cache = ReferenceCache()
        return _process_cache


def in_memory(path: Path) -> bool:
    """Whether `path` lies on a filesystem held in memory (tmpfs, ramfs): the mount with the longest prefix."""
    best, kind = "", ""
    try:
        mounts = psutil.disk_partitions(all=True)
    except (OSError, psutil.Error):  # no mount table to read: the byte bound alone holds
        return False
    for mount in mounts:
        point = mount.mountpoint.rstrip("/") + "/"
        if (str(path).rstrip("/") + "/").startswith(point) and len(point) > len(best):
            best, kind = point, mount.fstype
    return kind in ("tmpfs", "ramfs")


def _copy_files(source: Path, target: Path) -> dict[str, int]:
    """Copy each file of `source` into `target`: their names and sizes. A link or a folder in `source` is an
    OSError: a reference's directory holds plain files only."""
    files = {}
    for path in sorted(source.iterdir()):
        if path.is_symlink() or not path.is_file():
            raise OSError(f"{path.name} in {source} is not a plain file")
        shutil.copyfile(path, target / path.name)
        files[path.name] = (target / path.name).stat().st_size
    return files


def _bytes_under(directory: Path) -> int:
    try:
        return sum(path.stat().st_size for path in directory.rglob("*") if path.is_file())
    except OSError:  # gone meanwhile (a cancelled build): nothing held
        return 0


def compute_clean_reference(task: Task, options: VerifyOptions, directory: Path,
                            cancel: threading.Event | None = None) -> CleanReference:  # fmt: skip
    """Run the reference child (the task only, never candidate code); its outputs stay in `directory`. Setting
    `cancel` kills it (SandboxCancelled: nothing is kept)."""
    scratch = Path(tempfile.mkdtemp(prefix=config.SCRATCH_PREFIXES["reference"]))
    shutil.rmtree(directory, ignore_errors=True)
    directory.mkdir(parents=True)
    try:
        job = build_job(task, None, None, options, "reference", scratch)
        job["outputs_dir"] = str(directory)
        job["timed_samples"] = choose_timed_samples(job_counts(job)["timed_calls"], len(timing_seeds(job)))
        # Its GPU work shares the device with checks, never with a timing window.
        fork = config.FORK_REFERENCE_CHILDREN if options.fork_references is None else options.fork_references
        result, outcome = run_in_turn(job, scratch, options, config.REFERENCE_TIMEOUT_S, "reference", exclusive=False,
                                      writable=[directory], cancel=cancel, fork=fork)  # fmt: skip
        if result is None or not isinstance(result.get("manifest"), dict):
            if outcome.timed_out:
                how = f"timed out after {config.REFERENCE_TIMEOUT_S:g} s"
            elif result is None:
                how = f"ended without a result ({outcome.describe()})"
            else:
                how = f"failed: {result.get('error')}"
            tail = outcome.stderr_tail.strip()[-1000:]
            error = f"the reference child {how}" + (f"; stderr tail:\n{tail}" if tail else "")
            return CleanReference(error=error, origin="child", compute_s=outcome.wall_s)
        manifest = result["manifest"]
        if result.get("status") != "correct":
            return CleanReference(manifest=manifest, error=str(result.get("error")), compute_s=outcome.wall_s)
        outputs = tensor_files.OutputsDir(directory, config.REFERENCE_FILE_MAX_BYTES, keep_loaded=False)
        return CleanReference(outputs=outputs, manifest=manifest, compute_s=outcome.wall_s)
    except tensor_files.OutputFileError as exc:
        return CleanReference(error=f"the reference child's outputs: {exc}", origin="child")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
