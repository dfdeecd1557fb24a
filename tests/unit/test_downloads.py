"""Who may use the download panel, decided without any network (the transfers themselves are
tested against a stand-in hub in tests/integration/test_download.py)."""

from __future__ import annotations

from pathlib import Path

from fastapi.testclient import TestClient

from transformer_explainer.loading.download import git_blob_sha1, matches_etag
from transformer_explainer.server import ServerSettings, create_app
from transformer_explainer.server.run import ServeConfig, downloads_allowed


def test_allowed_on_loopback_by_default_and_on_an_exposed_server_only_when_asked():
    assert downloads_allowed(ServeConfig(host="127.0.0.1"))
    assert downloads_allowed(ServeConfig(host="::1"))
    assert not downloads_allowed(ServeConfig(host="0.0.0.0"))
    assert downloads_allowed(ServeConfig(host="0.0.0.0", api_downloads=True))
    assert not downloads_allowed(ServeConfig(host="127.0.0.1", workers=2))  # each process would download alone


def test_refused_when_off(tiny_model):
    with TestClient(create_app({"tiny": tiny_model}, ServerSettings(downloads=False))) as c:
        state = c.get("/api/downloads").json()
        assert not state["allowed"] and "--api-downloads" in state["reason"] and not state["jobs"]
        assert {o["model"] for o in state["offers"]} >= {"gpt2", "distilgpt2"}
        r = c.post("/api/downloads", json={"model": "gpt2"})
        assert r.status_code == 403 and "--api-downloads" in r.json()["detail"]
        assert c.post("/api/downloads", json={"model": "gpt2", "repo": "x/y"}).status_code == 422


def test_etags_check_content(tmp_path: Path):
    f = tmp_path / "config.json"
    f.write_bytes(b"hello\n")
    assert git_blob_sha1(f) == "ce013625030ba8dba906f756967f9e9ca394464a"  # `git hash-object` of "hello\n"
    assert matches_etag(f, "ce013625030ba8dba906f756967f9e9ca394464a")
    assert matches_etag(f, "5891b5b522d5df086d0ff0b110fbd9d21bb4fc7163af34d08286a2e846f6be03")  # sha256sum
    assert matches_etag(f, "0" * 64) is False and matches_etag(f, "not-a-hash") is False
