"""Download a checkpoint from the Hugging Face hub into the normal hub cache, verified, resumable:
in the background with progress (bytes, speed, time left) and cancel for the app's download panel
(`DownloadManager`, the known GPT-2 checkpoints), or in the foreground for `resolve` (a model named
on the command line, or a known one a request asks for on a server with API downloads).

huggingface_hub's own `hf_hub_download` resumes a broken transfer only within one call: it writes
to a temporary file unique to the process and deletes it when the call fails, so a download that
fails for longer, that the user cancels, or whose process is killed (then the file is left behind
for good) starts again from zero. Here each file is fetched with the hub client's `http_get` into
`blobs/<sha>.incomplete` in the cache, which is kept when a transfer stops; the next attempt asks
for the rest with an HTTP range.

The hub's answers are not used as paths unchecked: the ETag of every file must be the hash the hub
stores it under (the SHA-256 of a large file, the git blob hash of a small one) and the commit a git
hash, or nothing is written; a file that arrives with another hash is deleted. File names are taken
only from the fixed list of files a model needs, as plain names. The finished blobs are then linked
into `snapshots/<commit>/` and `refs/main` is written, the cache layout huggingface_hub reads
(https://huggingface.co/docs/huggingface_hub/guides/manage-cache): done here rather than by
`hf_hub_download`, which would ask the hub again and write wherever its second answer's ETag points.
"""

from __future__ import annotations

import fnmatch
import hashlib
import logging
import os
import re
import shutil
import tempfile
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from ..errors import ExplainerError, ModelNotFoundError, ParamValue, coded
from .hub import HUB_FILES, KNOWN_HUB_MODELS

log = logging.getLogger(__name__)

JobState = Literal["queued", "running", "done", "failed", "cancelled"]
# why a job failed: the hub could not be reached at all; the connection broke during the transfer
# (what is downloaded is kept); anything else (no such repo, a file that fails its checksum, no disk space)
FailureKind = Literal["offline", "interrupted", "error"]

METADATA_TIMEOUT_S = 5.0  # a hub that does not answer the file list in this time counts as unreachable
SPEED_WINDOW_S = 8.0  # speed = bytes over the last seconds (the hub client reports every 10 MiB)
CONTENT_HASH = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")  # an ETag we can check a file against
COMMIT_HASH = re.compile(r"[0-9a-f]{40}")


class DownloadBusy(ExplainerError):
    """Another download is running (one at a time)."""

    code = "download_busy"


class DownloadCancelled(Exception):
    pass


@dataclass
class DownloadJob:
    """One attempt at fetching a model; a new attempt after a failure or a cancel resumes from the
    bytes kept in the cache."""

    id: str
    model: str  # short name, e.g. "gpt2"
    repo: str  # hub repo, e.g. "openai-community/gpt2"
    state: JobState = "queued"
    files: list[str] = field(default_factory=list)
    bytes_total: int | None = None  # known once the hub has given the files' sizes
    bytes_done: int = 0  # including bytes kept from an earlier attempt
    bytes_resumed: int = 0  # bytes already in the cache when this attempt began
    current_file: str | None = None
    failure: FailureKind | None = None
    error: str | None = None
    error_code: str | None = None  # the error's code and params (errors.ERROR_CODES), for the UI's own words
    error_params: dict[str, ParamValue] = field(default_factory=dict)
    folder: Path | None = None  # the snapshot folder, once done
    started: float = field(default_factory=time.monotonic)
    finished: float | None = None
    _samples: deque[tuple[float, int]] = field(default_factory=deque, repr=False)
    _cancel: threading.Event = field(default_factory=threading.Event, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @property
    def active(self) -> bool:
        return self.state in ("queued", "running")

    def speed(self) -> float | None:
        """Bytes per second over the last few seconds; None before there is enough to tell."""
        with self._lock:
            if self.state != "running" or len(self._samples) < 2:
                return None
            (t0, b0), (t1, b1) = self._samples[0], self._samples[-1]
        if t1 - t0 < 0.2:
            return None
        return max(0.0, (b1 - b0) / (t1 - t0))

    def eta_s(self) -> float | None:
        speed = self.speed()
        if not speed or self.bytes_total is None:
            return None
        return max(0.0, (self.bytes_total - self.bytes_done) / speed)

    def advance(self, n: int) -> None:
        """`n` more bytes arrived (negative when the server ignored a range and the file restarts)."""
        if self._cancel.is_set():
            raise DownloadCancelled
        now = time.monotonic()
        with self._lock:
            self.bytes_done += n
            self._samples.append((now, self.bytes_done))
            while len(self._samples) > 2 and now - self._samples[0][0] > SPEED_WINDOW_S:
                self._samples.popleft()


def _progress_class(job: DownloadJob) -> type:
    """A tqdm class for the hub client that feeds `job` and prints nothing."""
    from huggingface_hub.utils import tqdm

    class JobProgress(tqdm):
        def __init__(self, *args, **kwargs) -> None:
            kwargs["disable"] = True
            super().__init__(*args, **kwargs)

        def update(self, n: float | None = 1) -> bool | None:
            job.advance(int(n or 0))
            return super().update(n)

    return JobProgress


def git_blob_sha1(path: Path) -> str:
    """The hash git gives a file's content: the etag the hub sends for files not stored in LFS."""
    h = hashlib.sha1(f"blob {path.stat().st_size}\0".encode())
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def matches_etag(path: Path, etag: str) -> bool:
    """Whether the file's content has the hash the etag names (a SHA-256, or a git blob hash);
    False for an etag that is neither, which no file can be verified against."""
    if len(etag) == 64 and CONTENT_HASH.fullmatch(etag):
        return file_sha256(path) == etag
    if len(etag) == 40 and CONTENT_HASH.fullmatch(etag):
        return git_blob_sha1(path) == etag
    return False


def is_network_error(e: BaseException) -> bool:
    from huggingface_hub.errors import OfflineModeIsEnabled

    root = type(e).__module__.split(".")[0]
    return isinstance(e, (ConnectionError, TimeoutError, OfflineModeIsEnabled)) or root in (
        "httpx", "httpx2", "requests", "urllib3")


@dataclass
class _RemoteFile:
    name: str  # a plain file name from HUB_FILES
    url: str
    etag: str  # checked: a content hash, so safe as a file name
    size: int | None


def _plain_name(name: str) -> bool:
    """A file of the repo's top folder whose name is safe to join to a path."""
    return bool(name) and "/" not in name and "\\" not in name and not name.startswith(".") and "\0" not in name


def wanted_files(present: list[str]) -> list[str]:
    """The files of a repo a model needs (HUB_FILES, whose patterns match shard names), in the hub's
    order; pytorch_model.bin only where there are no safetensors weights (older repos)."""
    wanted = [f for f in present if _plain_name(f) and any(fnmatch.fnmatchcase(f, p) for p in HUB_FILES)]
    if not any(f.endswith(".safetensors") for f in wanted) and "pytorch_model.bin" in present:
        wanted.append("pytorch_model.bin")
    return wanted


def remote_files(repo: str, *, endpoint: str | None = None,
                 timeout_s: float = METADATA_TIMEOUT_S) -> tuple[str, list[_RemoteFile]]:
    """The repo's current commit and the files to fetch with their etags and sizes; an ExplainerError
    when the hub's answers cannot be verified (an etag that is not a content hash, a commit that is
    not a git hash), before anything is written."""
    from huggingface_hub import HfApi, get_hf_file_metadata, hf_hub_url

    info = HfApi(endpoint=endpoint).model_info(repo, revision="main", timeout=timeout_s)
    commit = info.sha
    if not isinstance(commit, str) or not COMMIT_HASH.fullmatch(commit):
        raise ExplainerError(f"the hub named the commit of {repo} {commit!r}, which is not a git hash; nothing "
                             f"was downloaded")
    wanted = wanted_files([s.rfilename for s in info.siblings or []])
    if "config.json" not in wanted or not any(w.endswith((".safetensors", ".bin")) for w in wanted):
        raise ExplainerError(f"the hub repo {repo!r} has no config.json and weights to download",
                             code="download_no_files", repo=repo)
    out = []
    for name in wanted:
        meta = get_hf_file_metadata(hf_hub_url(repo, name, revision=commit, endpoint=endpoint), timeout=timeout_s)
        etag = meta.etag
        if not isinstance(etag, str) or not CONTENT_HASH.fullmatch(etag):
            raise ExplainerError(f"the hub sent {repo}/{name} with the ETag {etag!r}, which is not the file's "
                                 f"SHA-256 or git hash, so it cannot be verified; nothing was downloaded")
        if meta.commit_hash not in (None, commit):
            raise ExplainerError(f"the hub sent {repo}/{name} from commit {meta.commit_hash!r}, not {commit}; "
                                 f"the repo changed during the download, try again")
        size = meta.size if isinstance(meta.size, int) and meta.size >= 0 else None
        out.append(_RemoteFile(name, meta.location, etag, size))
    return commit, out


def _storage(repo: str, cache_dir: Path | None) -> Path:
    from huggingface_hub import constants
    from huggingface_hub.file_download import repo_folder_name

    return Path(cache_dir or constants.HF_HUB_CACHE) / repo_folder_name(repo_id=repo, repo_type="model")


def _fetch_blob(r: _RemoteFile, blobs: Path, job: DownloadJob | None) -> None:
    """`blobs/<etag>`, fetched into `blobs/<etag>.incomplete` from where an earlier attempt stopped,
    and verified against the etag before it takes its name."""
    from huggingface_hub.file_download import http_get
    from huggingface_hub.utils import build_hf_headers

    blob, part = blobs / r.etag, blobs / f"{r.etag}.incomplete"
    if blob.is_file():
        return
    have = part.stat().st_size if part.is_file() else 0
    if r.size is not None and have > r.size:  # not a prefix of this file: start it again
        if job is not None:
            job.advance(-have)
        part.unlink()
        have = 0
    with part.open("ab") as f:
        http_get(r.url, f, resume_size=have, headers=build_hf_headers(), expected_size=r.size,
                 displayed_filename=r.name, tqdm_class=_progress_class(job) if job is not None else None)
    if not matches_etag(part, r.etag):
        if job is not None:
            job.advance(-part.stat().st_size)
        part.unlink()
        raise ExplainerError(f"{r.name} arrived damaged (its hash does not match the hub's); it was deleted, "
                             f"try again", code="download_damaged", file=r.name)
    os.replace(part, blob)


def _write_atomic(path: Path, write: Callable[[Path], None]) -> None:
    """`write(tmp)` beside `path`, then renamed over it: a reader sees the old entry or the new one."""
    tmp = Path(tempfile.mkdtemp(dir=path.parent, prefix=f".{path.name}.")) / path.name
    try:
        write(tmp)
        os.replace(tmp, path)
    finally:
        shutil.rmtree(tmp.parent, ignore_errors=True)


def _link_snapshot(storage: Path, commit: str, files: list[_RemoteFile]) -> Path:
    """`snapshots/<commit>/<name>` -> `../../blobs/<etag>` for each file, and `refs/main` = commit:
    the cache layout huggingface_hub reads (a copy of the blob where symlinks cannot be made)."""
    snapshot = storage / "snapshots" / commit
    snapshot.mkdir(parents=True, exist_ok=True)
    for r in files:
        blob = storage / "blobs" / r.etag

        def link(tmp: Path, blob: Path = blob) -> None:
            try:
                os.symlink(os.path.relpath(blob, snapshot), tmp)
            except OSError:  # e.g. Windows without the symlink privilege
                shutil.copyfile(blob, tmp)

        _write_atomic(snapshot / r.name, link)
    (storage / "refs").mkdir(exist_ok=True)
    _write_atomic(storage / "refs" / "main", lambda tmp: tmp.write_text(commit))
    return snapshot


def fetch_repo(repo: str, *, cache_dir: Path | None = None, endpoint: str | None = None,
               job: DownloadJob | None = None, metadata_timeout_s: float = METADATA_TIMEOUT_S,
               announce: Callable[[int], None] | None = None) -> Path:
    """Download the files a model needs from `repo` into the hub cache (resuming what an earlier
    attempt kept) and return its snapshot folder. `job`: progress and cancel for the download panel
    (without one, the hub client shows its own progress bars). `announce(bytes_to_fetch)` is called
    before a transfer starts, when there is one."""
    commit, remote = remote_files(repo, endpoint=endpoint, timeout_s=metadata_timeout_s)
    storage = _storage(repo, cache_dir)
    blobs = storage / "blobs"
    blobs.mkdir(parents=True, exist_ok=True)
    done = 0
    for r in remote:
        blob, part = blobs / r.etag, blobs / f"{r.etag}.incomplete"
        if blob.is_file():
            done += blob.stat().st_size
        elif part.is_file():
            done += part.stat().st_size
    total = sum(r.size or 0 for r in remote)
    if job is not None:
        job.files = [r.name for r in remote]
        job.bytes_resumed = job.bytes_done = done
        job.bytes_total = total
    if announce is not None and total > done:
        announce(total - done)
    for r in remote:
        if job is not None:
            if job._cancel.is_set():
                raise DownloadCancelled
            job.current_file = r.name
        _fetch_blob(r, blobs, job)
    return _link_snapshot(storage, commit, remote)


class DownloadManager:
    """Background downloads of the known GPT-2 checkpoints, one at a time. `on_done(name, folder)`
    is called when a model is in the cache (the server's registry learns it there)."""

    def __init__(self, *, cache_dir: Path | None = None,
                 on_done: Callable[[str, Path], None] | None = None,
                 metadata_timeout_s: float = METADATA_TIMEOUT_S, endpoint: str | None = None) -> None:
        self.cache_dir = cache_dir
        self.endpoint = endpoint  # the hub's address; None: huggingface_hub's (HF_ENDPOINT)
        self.on_done = on_done
        self.metadata_timeout_s = metadata_timeout_s
        self._jobs: dict[str, DownloadJob] = {}  # the latest attempt per model
        self._lock = threading.Lock()
        self._count = 0
        self._thread: threading.Thread | None = None  # the latest job's; a cancelled one may still be stopping

    def jobs(self) -> list[DownloadJob]:
        with self._lock:
            return list(self._jobs.values())

    def job(self, job_id: str) -> DownloadJob | None:
        return next((j for j in self.jobs() if j.id == job_id), None)

    def start(self, model: str) -> DownloadJob:
        """Start (or resume) downloading `model`, a short name from KNOWN_HUB_MODELS."""
        if model not in KNOWN_HUB_MODELS:
            raise ModelNotFoundError(f"{model!r} is not a model this server downloads; it offers "
                                     f"{', '.join(KNOWN_HUB_MODELS)}", code="download_not_offered", model=model,
                                     offered=", ".join(KNOWN_HUB_MODELS))
        with self._lock:
            running = next((j for j in self._jobs.values() if j.active), None)
            if running is not None:
                raise DownloadBusy(f"{running.model} is downloading; one download at a time (cancel it first)",
                                   model=running.model)
            self._count += 1
            job = DownloadJob(id=f"{model}-{self._count}", model=model, repo=KNOWN_HUB_MODELS[model][0])
            self._jobs[model] = job
            previous = self._thread
            self._thread = threading.Thread(target=self._run, args=(job, previous), name=f"download-{job.id}",
                                            daemon=True)
            self._thread.start()
        return job

    def cancel(self, job_id: str) -> DownloadJob:
        """Stop a job. It reads as cancelled at once; its thread stops when the hub client next
        reports progress (every 10 MiB), and a new job waits for that before it touches the files."""
        job = self.job(job_id)
        if job is None:
            raise ModelNotFoundError(f"no download {job_id!r}", code="download_not_found", id=job_id)
        with self._lock:
            job._cancel.set()
            if job.active:
                job.state, job.finished = "cancelled", time.monotonic()
        return job

    # -- the work, in the job's thread -------------------------------------------------------------

    def _run(self, job: DownloadJob, previous: threading.Thread | None) -> None:
        if previous is not None:
            previous.join()  # a cancelled job still writing its last chunk
        with self._lock:
            if job._cancel.is_set():
                return
            job.state = "running"
        try:
            folder = fetch_repo(job.repo, cache_dir=self.cache_dir, endpoint=self.endpoint, job=job,
                                metadata_timeout_s=self.metadata_timeout_s)
            job.folder = folder
            if self.on_done is not None:
                self.on_done(job.model, folder)
            job.state = "done"
        except DownloadCancelled:
            job.state = "cancelled"
        except Exception as e:  # every failure ends the job with a message; nothing is lost from the cache
            if job._cancel.is_set():
                job.state = "cancelled"
            else:
                job.failure, failure = self._explain(job, e)
                job.error, job.error_code, job.error_params = str(failure), *(coded(failure) or ("error", {}))
                job.state = "failed"
                log.warning("download of %s failed: %s", job.repo, job.error)
        finally:
            job.current_file = None
            if job.finished is None:
                job.finished = time.monotonic()

    def _explain(self, job: DownloadJob, e: Exception) -> tuple[FailureKind, ExplainerError]:
        """What kind of failure `e` is, and the error the job reports (its message, code and params)."""
        from huggingface_hub.errors import GatedRepoError, RepositoryNotFoundError

        if isinstance(e, (RepositoryNotFoundError, GatedRepoError)):
            return "error", ExplainerError(f"the hub has no public repo {job.repo!r}", code="download_no_repo",
                                           repo=job.repo)
        if is_network_error(e):
            if job.bytes_total is None:
                return "offline", ExplainerError(f"the Hugging Face hub cannot be reached ({type(e).__name__}); "
                                                 f"check the connection and try again", code="download_offline")
            return "interrupted", ExplainerError(
                f"the connection broke ({type(e).__name__}); {job.bytes_done:,} of {job.bytes_total:,} bytes are "
                f"kept, and the next attempt resumes from there", code="download_interrupted", done=job.bytes_done,
                total=job.bytes_total)
        if isinstance(e, ExplainerError):
            return "error", e
        why = f"{type(e).__name__}: {e}"
        return "error", ExplainerError(why, code="download_failed", reason=why)
