"""Downloads from a hub that may be hostile, against a local stand-in hub (tests/hub_standin.py) in
this process: nothing the hub says is used as a path unchecked, and no file that cannot be verified
is kept. No network: the stand-in listens on 127.0.0.1."""

from __future__ import annotations

import hashlib
import time
from pathlib import Path

import pytest

from tests.conftest import make_hf_gpt2
from tests.hub_standin import StandInHub
from transformer_explainer import load_model
from transformer_explainer.errors import ExplainerError
from transformer_explainer.loading.download import DownloadManager, fetch_repo, matches_etag, wanted_files

REPO = "openai-community/gpt2"  # what `gpt2` means to the download panel


@pytest.fixture(scope="module")
def hub_files(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_hf_gpt2(tmp_path_factory.mktemp("hub-gpt2"))


def files_under(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file() or p.is_symlink())


def run_job(manager: DownloadManager, model: str = "gpt2", timeout_s: float = 60):
    job = manager.start(model)
    deadline = time.monotonic() + timeout_s
    while job.active:
        assert time.monotonic() < deadline, job
        time.sleep(0.05)
    return job


@pytest.mark.parametrize("name", ["model.safetensors", "config.json"])
@pytest.mark.parametrize("etag", ["../../../evil", "/tmp/evil", "not-a-hash", "A" * 64])
def test_an_etag_that_is_not_a_content_hash_writes_nothing(hub_files: Path, tmp_path: Path, name: str, etag: str):
    hub = StandInHub(REPO, hub_files)
    hub.etags[name] = etag
    with hub.running():
        job = run_job(DownloadManager(cache_dir=tmp_path / "cache" / "hub", endpoint=hub.url))
    assert job.state == "failed" and job.failure == "error", job
    assert f"{REPO}/{name} with the ETag" in job.error and "cannot be verified; nothing was downloaded" in job.error
    assert files_under(tmp_path) == []  # not in the cache, and not beside or above it
    assert not [m for m, path, _ in hub.requests if m == "GET" and "/resolve/" in path]  # no file was fetched


def test_a_file_whose_content_does_not_match_its_etag_is_deleted(hub_files: Path, tmp_path: Path):
    hub = StandInHub(REPO, hub_files)
    hub.etags["model.safetensors"] = hashlib.sha256(b"something else").hexdigest()
    cache = tmp_path / "hub"
    with hub.running(), pytest.raises(ExplainerError, match="model.safetensors arrived damaged"):
        fetch_repo(REPO, cache_dir=cache, endpoint=hub.url)
    blobs = cache / f"models--{REPO.replace('/', '--')}" / "blobs"
    assert not [p for p in blobs.iterdir() if p.name.startswith(hub.etags["model.safetensors"])]
    assert not (cache / f"models--{REPO.replace('/', '--')}" / "snapshots").exists()


def test_a_verified_download_is_a_cache_entry_huggingface_hub_reads(hub_files: Path, tmp_path: Path):
    from huggingface_hub import snapshot_download

    hub = StandInHub(REPO, hub_files)
    cache = tmp_path / "hub"
    with hub.running():
        folder = fetch_repo(REPO, cache_dir=cache, endpoint=hub.url)
    # each file's metadata was asked once: the snapshot was linked from those answers, not from new ones
    heads = [path for method, path, _ in hub.requests if method == "HEAD"]
    assert sorted(h.rsplit("/", 1)[1] for h in heads) == sorted(wanted_files(list(hub.files)))
    assert Path(snapshot_download(REPO, cache_dir=cache, local_files_only=True)) == folder
    for name in ("config.json", "model.safetensors", "vocab.json", "merges.txt"):
        assert (folder / name).read_bytes() == (hub_files / name).read_bytes()
    assert load_model(str(folder), allow_download=False).config.n_layer == 2
    assert not list(cache.rglob("*.incomplete"))


def test_a_kept_partial_file_is_resumed_with_a_range(hub_files: Path, tmp_path: Path):
    hub = StandInHub(REPO, hub_files)
    cache = tmp_path / "hub"
    weights = (hub_files / "model.safetensors").read_bytes()
    blobs = cache / f"models--{REPO.replace('/', '--')}" / "blobs"
    blobs.mkdir(parents=True)
    (blobs / f"{hub.etags['model.safetensors']}.incomplete").write_bytes(weights[:100_000])
    with hub.running():
        folder = fetch_repo(REPO, cache_dir=cache, endpoint=hub.url)
    assert hub.weight_requests() == ["bytes=100000-"]
    assert (folder / "model.safetensors").read_bytes() == weights and not list(blobs.glob("*.incomplete"))


def test_only_plain_names_of_the_files_a_model_needs_are_fetched():
    assert wanted_files(["config.json", "README.md", "model-00001-of-00002.safetensors", "model.safetensors",
                         "model-../../x-of-1.safetensors", "sub/config.json", ".config.json", "flax_model.msgpack",
                         "pytorch_model.bin"]) == ["config.json", "model-00001-of-00002.safetensors",
                                                   "model.safetensors"]
    assert wanted_files(["config.json", "pytorch_model.bin"]) == ["config.json", "pytorch_model.bin"]


def test_an_etag_that_is_not_a_hash_verifies_nothing(tmp_path: Path):
    f = tmp_path / "x"
    f.write_bytes(b"hello\n")
    assert matches_etag(f, "ce013625030ba8dba906f756967f9e9ca394464a")
    assert matches_etag(f, "../../../evil") is False
    assert matches_etag(f, "CE013625030BA8DBA906F756967F9E9CA394464A") is False  # the hub's hashes are lower case
