"""The download panel's API: fetch a known GPT-2 checkpoint from the Hugging Face hub while the app
runs, watch its progress, cancel it, resume it, then use it.

Allowed when the server says so (`ServerSettings.downloads`: on by default for a server bound to
this machine only, on for an exposed one only with `serve --api-downloads`). A request names a
model by its short name from the allow-list (`KNOWN_HUB_MODELS`), never a repo or a path.
"""

from __future__ import annotations

import time
from typing import Annotated

from fastapi import APIRouter
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field

from ..errors import coded, error_answer
from ..loading.download import DownloadBusy, DownloadJob, DownloadManager, FailureKind, JobState
from ..loading.resolve import KNOWN_HUB_MODELS
from ..schemas import ErrorCode, ErrorOut, Strict
from .registry import ModelRegistry


class DownloadIn(Strict):
    """Start downloading a model, or resume its interrupted download."""

    model: Annotated[str, Field(min_length=1, max_length=64, examples=["gpt2"])]


class DownloadOffer(BaseModel):
    """A model this server can download."""

    model: str  # short name, as the model list will show it once downloaded
    repo: str  # its repo on the Hugging Face hub
    params: str  # parameter count in words, e.g. "124M"
    approx_bytes: int  # size of its weights file
    available: bool  # already here: choosing it downloads nothing


class DownloadJobOut(BaseModel):
    """One download attempt and its progress."""

    id: str
    model: str
    repo: str
    state: JobState
    files: list[str]  # the files fetched (known once the hub has answered)
    current_file: str | None
    bytes_total: int | None  # None until the hub has given the sizes
    bytes_done: int  # including bytes kept from an earlier, interrupted attempt
    bytes_resumed: int  # bytes already downloaded when this attempt began
    speed_bps: float | None  # bytes per second over the last few seconds
    eta_s: float | None  # seconds left at that speed
    elapsed_s: float
    failure: FailureKind | None  # offline: the hub cannot be reached; interrupted: the connection broke
    error: str | None  # why it failed, in English
    error_code: ErrorCode | None  # the same as a code and params (errors.ERROR_CODES), for the UI's own words
    error_params: dict[str, str | int | float]


class DownloadsOut(BaseModel):
    """Whether this server downloads models, what it offers, and its downloads."""

    allowed: bool
    reason: str | None  # why not, when not allowed
    offers: list[DownloadOffer]
    jobs: list[DownloadJobOut]


REFUSED = {403: {"model": ErrorOut, "description": "this server does not download models"}}
NOT_ALLOWED = ("this server does not download models: it is reachable from other machines and was started "
               "without --api-downloads")


def job_out(job: DownloadJob) -> DownloadJobOut:
    end = job.finished if job.finished is not None else time.monotonic()
    return DownloadJobOut(id=job.id, model=job.model, repo=job.repo, state=job.state, files=list(job.files),
                          current_file=job.current_file, bytes_total=job.bytes_total, bytes_done=job.bytes_done,
                          bytes_resumed=job.bytes_resumed, speed_bps=job.speed(), eta_s=job.eta_s(),
                          elapsed_s=end - job.started, failure=job.failure, error=job.error,
                          error_code=job.error_code, error_params=job.error_params)


def downloads_router(registry: ModelRegistry, allowed: bool, manager: DownloadManager | None = None) -> APIRouter:
    """`/api/downloads`; a finished download is added to `registry`."""
    manager = manager or DownloadManager(on_done=registry.add_downloaded)
    r = APIRouter(prefix="/api/downloads")

    def refused() -> JSONResponse:
        return JSONResponse(error_answer(NOT_ALLOWED, "downloads_off"), status_code=403)

    def state() -> DownloadsOut:
        offers = [DownloadOffer(model=name, repo=repo, params=params, approx_bytes=size,
                                available=registry.has_files(name))
                  for name, (repo, params, size) in KNOWN_HUB_MODELS.items()]
        return DownloadsOut(allowed=allowed, reason=None if allowed else NOT_ALLOWED, offers=offers,
                            jobs=[job_out(j) for j in manager.jobs()])

    @r.get("", response_model=DownloadsOut)
    async def downloads() -> DownloadsOut:
        return state()

    @r.post("", response_model=DownloadJobOut,
            responses={**REFUSED, 409: {"model": ErrorOut, "description": "another download is running"}})
    async def start(body: DownloadIn) -> DownloadJobOut | JSONResponse:
        if not allowed:
            return refused()
        try:
            job = manager.start(body.model)
        except DownloadBusy as e:
            return JSONResponse(error_answer(str(e), *(coded(e) or ("download_busy", {}))), status_code=409)
        return job_out(job)

    @r.post("/{job_id}/cancel", response_model=DownloadJobOut, responses=REFUSED)
    async def cancel(job_id: str) -> DownloadJobOut | JSONResponse:
        if not allowed:
            return refused()
        return job_out(manager.cancel(job_id))  # an unknown id: ModelNotFoundError, 404

    return r
