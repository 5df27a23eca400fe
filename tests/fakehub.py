"""A minimal fake Hugging Face Hub HTTP server, for offline tests.

Why: `esbench prefetch` downloads models and data sets from the Hub into the HF caches so that later runs work with
`HF_HUB_OFFLINE=1`. The test machines have no Hub access, so its tests point the HF libraries at this server on
127.0.0.1 instead, and then check that the offline loads find everything in the cache.

What it serves: a folder laid out as `root/{models,datasets}/<org>/<name>/<revision>/<files...>` (revision: a
40-hex commit; files may sit in sub-folders). It implements only what huggingface_hub 2.4, transformers 5.24 and
datasets 5.2 use to download a repo at a pinned revision (found by reading their source, then by running them):

- `GET /api/{models,datasets}/<repo>[/revision/<rev>]`: repo info (`sha`, `siblings`), used by `repo_info`,
  `dataset_info` and `resolve_revision` (`main` resolves to the most recently added revision).
- `GET /api/{models,datasets}/<repo>/tree/<rev>[/<path>][?recursive=true]`: tree listing (`snapshot_download`,
  `HfFileSystem.ls`/`glob` in `datasets`, transformers' `list_repo_files` and chat-template look-up). One page,
  no `Link` header.
- `POST /api/{models,datasets}/<repo>/paths-info/<rev>` (form field `paths`, repeated): `HfFileSystem.info`
  (not reached by the load paths above at these versions; kept because it is small).
- `HEAD`/`GET /<repo>/resolve/<rev>/<path>` and `/datasets/<repo>/resolve/<rev>/<path>`: the file, with
  `X-Repo-Commit`, `ETag` (the git blob sha1, as the Hub sends for non-LFS files), `Content-Length` and `Range`
  support (`HfFileSystem` reads by range). No Xet or LFS headers, so the plain HTTP download path is taken.
- `GET /api/agent-harnesses`: an empty registry (huggingface_hub fetches it for its user agent unless
  `HF_HUB_DISABLE_TELEMETRY` is set).

Errors carry the Hub's `X-Error-Code` (`RepoNotFound`, `RevisionNotFound`, `EntryNotFound`, with `X-Repo-Commit`
on the last, as huggingface_hub caches the absence of optional files by it). Requests it does not implement are
answered 404 and logged to stderr as `FakeHub: UNHANDLED ...`; every request is recorded in `FakeHub.requests`.

Pointing the libraries at it: huggingface_hub reads `HF_ENDPOINT`, `HF_HUB_OFFLINE` and the cache paths into
module constants at import time (`constants.ENDPOINT`, `HUGGINGFACE_CO_URL_TEMPLATE`, `HF_HUB_OFFLINE`,
`HF_HUB_CACHE`), transformers reads those constants at call time, and datasets copies them once more at import
(`datasets.config.HF_ENDPOINT`, `HUB_DATASETS_URL`, `HF_HUB_OFFLINE`, `HF_DATASETS_CACHE`, ...). Patching the four
huggingface_hub constants in-process was enough for `snapshot_download`, but chasing every copy for datasets is
fragile (and tests/conftest.py has already set both offline flags before anything is imported), so the robust way,
used by `tests/test_fakehub.py`, is to run the HF code in a subprocess whose environment is
`hub.env(hf_home, offline=...)`: `HF_ENDPOINT`, fresh `HF_HOME`/`HF_HUB_CACHE`/`HF_DATASETS_CACHE`, explicit
`HF_HUB_OFFLINE`/`HF_DATASETS_OFFLINE`, telemetry and Xet off. The server itself runs in the test process, on a
thread. In-process, `HfApi(endpoint=hub.endpoint)` / `HfFileSystem(endpoint=...)` also work once
`huggingface_hub.constants.HF_HUB_OFFLINE` is patched to False.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import sys
import tempfile
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlsplit

COMMIT = re.compile(r"[0-9a-f]{40}")


def hub_env(endpoint: str, hf_home: str | Path, *, offline: bool = False) -> dict[str, str]:
    """This process's environment without HF settings, pointed at `endpoint` with caches under `hf_home`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGINGFACE_", "TRANSFORMERS_"))}
    flag = "1" if offline else "0"
    hf_home = Path(hf_home)
    env.update(
        HF_ENDPOINT=endpoint,
        HF_HOME=str(hf_home),
        HF_HUB_CACHE=str(hf_home / "hub"),
        HF_DATASETS_CACHE=str(hf_home / "datasets"),
        HF_HUB_OFFLINE=flag,
        HF_DATASETS_OFFLINE=flag,
        HF_HUB_DISABLE_TELEMETRY="1",
        HF_HUB_DISABLE_PROGRESS_BARS="1",
        HF_HUB_DISABLE_UPDATE_CHECK="1",
        HF_HUB_DISABLE_XET="1",
        TQDM_DISABLE="1",
    )
    return env


class FakeHub:
    """Serve `root` (a temp folder by default) as a Hub on `http://127.0.0.1:<free port>` while in a `with`."""

    def __init__(self, root: str | Path | None = None):
        self._tmp = None if root is not None else tempfile.mkdtemp(prefix="fakehub-")
        self.root = Path(root if root is not None else self._tmp)
        self.requests: list[str] = []  # "METHOD /path?query", in arrival order
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle ---------------------------------------------------------------------------------------------
    def __enter__(self) -> FakeHub:
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        self._server.daemon_threads = True
        self._server.hub = self  # type: ignore[attr-defined]
        self._thread = threading.Thread(target=self._server.serve_forever, name="fakehub", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._thread.join(timeout=10)
            self._server = None
        if self._tmp is not None:
            shutil.rmtree(self._tmp, ignore_errors=True)

    @property
    def endpoint(self) -> str:
        assert self._server is not None, "FakeHub is not running (use it as a context manager)"
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def env(self, hf_home: str | Path, *, offline: bool = False) -> dict[str, str]:
        """Environment for a subprocess using this hub, with its caches under `hf_home` (see module docstring)."""
        return hub_env(self.endpoint, hf_home, offline=offline)

    # -- content -----------------------------------------------------------------------------------------------
    def add_model(self, repo_id: str, revision: str, folder: str | Path) -> Path:
        return self._add("models", repo_id, revision, folder)

    def add_dataset(self, repo_id: str, revision: str, folder: str | Path) -> Path:
        return self._add("datasets", repo_id, revision, folder)

    def _add(self, kind: str, repo_id: str, revision: str, folder: str | Path) -> Path:
        if not COMMIT.fullmatch(revision) or repo_id.count("/") != 1:
            raise ValueError(f"need an 'org/name' repo id and a 40-hex revision, got {repo_id!r} @ {revision!r}")
        dest = self.root / kind / repo_id / revision
        shutil.copytree(folder, dest, dirs_exist_ok=True)
        os.utime(dest)  # copytree copied the source folder's mtime; `main` means the newest revision added
        return dest

    def resolve(self, kind: str, repo_id: str, revision: str) -> Path | None:
        """The folder of `revision` (a commit, or `main` = the newest one added); None if there is none."""
        repo = self.root / kind / repo_id
        if COMMIT.fullmatch(revision):
            return repo / revision if (repo / revision).is_dir() else None
        revs = [p for p in repo.iterdir() if p.is_dir() and COMMIT.fullmatch(p.name)] if repo.is_dir() else []
        return max(revs, key=lambda p: p.stat().st_mtime) if revision == "main" and revs else None


def _blob_oid(path: Path) -> str:
    data = path.read_bytes()
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def _entry(base: Path, path: Path) -> dict:
    rel = path.relative_to(base).as_posix()
    if path.is_dir():
        return {"type": "directory", "path": rel, "oid": hashlib.sha1(rel.encode()).hexdigest(), "size": 0}
    return {"type": "file", "path": rel, "oid": _blob_oid(path), "size": path.stat().st_size}


class _Handler(BaseHTTPRequestHandler):
    server_version = "FakeHub/1"

    @property
    def hub(self) -> FakeHub:
        return self.server.hub  # type: ignore[attr-defined]

    def log_message(self, format, *args) -> None:  # quiet: requests are kept in hub.requests instead
        pass

    def do_HEAD(self) -> None:
        self._dispatch("HEAD")

    def do_GET(self) -> None:
        self._dispatch("GET")

    def do_POST(self) -> None:
        self._dispatch("POST")

    # -- routing -----------------------------------------------------------------------------------------------
    def _dispatch(self, method: str) -> None:
        self.hub.requests.append(f"{method} {self.path}")
        url = urlsplit(self.path)
        parts = [unquote(p) for p in url.path.strip("/").split("/")]
        query = parse_qs(url.query)
        if ".." in parts:
            return self._unhandled(method)
        try:
            if url.path == "/api/agent-harnesses":  # huggingface_hub's user-agent telemetry: an empty registry
                return self._json({"standardEnvVars": [], "harnesses": {}})
            if parts[0] == "api" and len(parts) >= 4 and parts[1] in ("models", "datasets"):
                return self._api(method, parts[1], "/".join(parts[2:4]), parts[4:], query)
            kind, rest = ("datasets", parts[1:]) if parts[0] == "datasets" else ("models", parts)
            if method in ("GET", "HEAD") and len(rest) >= 5 and rest[2] == "resolve":
                return self._file(method, kind, "/".join(rest[:2]), rest[3], "/".join(rest[4:]))
        except Exception as e:  # a bug here should show up in the test output, not as a hang
            print(f"FakeHub: ERROR on {method} {self.path}: {e!r}", file=sys.stderr)
            return self._send(500, b"", {})
        self._unhandled(method)

    def _api(self, method: str, kind: str, repo_id: str, rest: list[str], query: dict) -> None:
        if not (self.hub.root / kind / repo_id).is_dir():
            return self._error(404, "RepoNotFound")
        if len(rest) == 1:
            return self._unhandled(method)
        op, rev = (rest[0], rest[1]) if rest else ("revision", "main")
        base = self.hub.resolve(kind, repo_id, rev)
        if base is None:
            return self._error(404, "RevisionNotFound")
        if method == "GET" and op == "revision" and len(rest) <= 2:
            files = sorted(p.relative_to(base).as_posix() for p in base.rglob("*") if p.is_file())
            info = {"id": repo_id, "sha": base.name, "private": False, "siblings": [{"rfilename": f} for f in files]}
            return self._json(info, base.name)
        if method == "GET" and op == "tree":
            folder = base.joinpath(*rest[2:])
            if not folder.is_dir():
                return self._error(404, "EntryNotFound", base.name)
            recursive = query.get("recursive", ["false"])[0].lower() in ("1", "true")
            paths = sorted(folder.rglob("*") if recursive else folder.iterdir())
            return self._json([_entry(base, p) for p in paths], base.name)
        if method == "POST" and op == "paths-info":
            length = int(self.headers.get("Content-Length") or 0)
            form = parse_qs(self.rfile.read(length).decode())
            paths = [base / p.strip("/") for p in form.get("paths", [])]
            return self._json([_entry(base, p) for p in paths if p.exists()], base.name)
        self._unhandled(method)

    def _file(self, method: str, kind: str, repo_id: str, rev: str, path: str) -> None:
        if not (self.hub.root / kind / repo_id).is_dir():
            return self._error(404, "RepoNotFound")
        base = self.hub.resolve(kind, repo_id, rev)
        if base is None:
            return self._error(404, "RevisionNotFound")
        file = base / path
        if not file.is_file():
            return self._error(404, "EntryNotFound", base.name)
        data = file.read_bytes()
        headers = {"X-Repo-Commit": base.name, "ETag": f'"{_blob_oid(file)}"', "Accept-Ranges": "bytes"}
        status, body = 200, data
        ranged = re.fullmatch(r"bytes=(\d+)-(\d*)", self.headers.get("Range", ""))
        if ranged:
            start, end = int(ranged[1]), int(ranged[2] or len(data) - 1)
            if start >= len(data):
                return self._send(416, b"", {**headers, "Content-Range": f"bytes */{len(data)}"})
            end = min(end, len(data) - 1)
            status, body = 206, data[start : end + 1]
            headers["Content-Range"] = f"bytes {start}-{end}/{len(data)}"
        self._send(status, body, headers, head=method == "HEAD")

    # -- responses ---------------------------------------------------------------------------------------------
    def _json(self, obj, commit: str | None = None) -> None:
        headers = {"Content-Type": "application/json"} | ({"X-Repo-Commit": commit} if commit else {})
        self._send(200, json.dumps(obj).encode(), headers)

    def _error(self, status: int, code: str, commit: str | None = None) -> None:
        headers = {"X-Error-Code": code, "X-Error-Message": code, "Content-Type": "application/json"}
        if commit:
            headers["X-Repo-Commit"] = commit
        self._send(status, json.dumps({"error": code}).encode(), headers)

    def _unhandled(self, method: str) -> None:
        print(f"FakeHub: UNHANDLED {method} {self.path} (answered 404)", file=sys.stderr)
        self._send(404, b'{"error": "not implemented by FakeHub"}', {"Content-Type": "application/json"})

    def _send(self, status: int, body: bytes, headers: dict, head: bool = False) -> None:
        self.send_response(status)
        for key, value in headers.items():
            self.send_header(key, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if not head:
            self.wfile.write(body)
