"""Fixtures of the pytest-lsp conformance suite (PROTOCOL.md).

Every test gets a fresh temporary directory holding

* ``repo/``: a git repository with one commit; it is the workspace folder and ``rootUri``;
* ``data/``: the data directory (``--data-dir`` and ``initializationOptions.forge.dataDir``);
* ``config/``, ``runtime/``, ``home/``: ``XDG_CONFIG_HOME``, ``XDG_RUNTIME_DIR`` and ``HOME``
  of the server, so nothing outside the temporary directory is read or written.

The ``forge`` fixture starts ``$FORGE_LSP_BIN`` (stdio, ``--data-dir``) with ``server_env``
pointing there, initializes it as agent ``user`` with the repository as workspace folder and
``rootUri``, and the capabilities of a real client: it is parametrized over pytest-lsp's
recorded ``visual-studio-code`` and ``neovim`` capabilities. Tests needing another identity,
other capabilities or several connections start servers with ``servers.start(...)``; every
server is shut down (``shutdown`` + ``exit``) at teardown.
"""

from __future__ import annotations

import asyncio
import copy
import functools
import os
import pathlib
import shutil
import subprocess
from dataclasses import dataclass, field
from typing import Any

import pytest
import pytest_asyncio
import pytest_lsp
from lsprotocol import types
from pygls.exceptions import JsonRpcException
from pygls.protocol import default_converter
from pytest_lsp import ClientServerConfig, LanguageClient
from pytest_lsp.client import register_lsp_features

REPO_ROOT = pathlib.Path(__file__).resolve().parents[2]

# Generous: the suite must not be timing-flaky on a loaded 2-core CI machine.
WAIT = 10.0

CLIENTS = ["visual-studio-code", "neovim"]


def server_binary() -> str:
    path = os.environ.get("FORGE_LSP_BIN") or str(REPO_ROOT / "target/debug/forge-lsp")
    if not os.access(path, os.X_OK):
        pytest.exit(
            f"forge-lsp binary not found at {path}: build it (cargo build --bins) and set FORGE_LSP_BIN",
            returncode=4,
        )
    return path


@functools.cache
def _recorded_capabilities(name: str) -> types.ClientCapabilities:
    return pytest_lsp.client_capabilities(name)


def capabilities(name: str, *, text_document_content: bool | None = None) -> types.ClientCapabilities:
    """A client's recorded capabilities (pytest-lsp's ``client_capabilities(name)``, a fresh copy);
    optionally (un)declare ``workspace.textDocumentContent``."""
    caps = copy.deepcopy(_recorded_capabilities(name))
    if text_document_content is not None:
        if caps.workspace is None:
            caps.workspace = types.WorkspaceClientCapabilities()
        caps.workspace.text_document_content = (
            types.TextDocumentContentClientCapabilities(dynamic_registration=False) if text_document_content else None
        )
    return caps


def declares_text_document_content(caps: types.ClientCapabilities) -> bool:
    return caps.workspace is not None and caps.workspace.text_document_content is not None


def declares_utf8(caps: types.ClientCapabilities) -> bool:
    enc = caps.general.position_encodings if caps.general else None
    return bool(enc) and types.PositionEncodingKind.Utf8 in enc


def _git(repo: pathlib.Path, env: dict[str, str], *args: str) -> None:
    subprocess.run(["git", *args], cwd=repo, env=env, check=True, capture_output=True)


@functools.cache
def _shared_converter():
    # pygls compiles (un)structure hooks per converter on first use: sharing one converter
    # between the clients of the suite saves about 0.2 s per started server.
    return default_converter()


def make_client() -> LanguageClient:
    """pytest-lsp's test client (same default features), with the shared converter."""
    client = LanguageClient(converter_factory=_shared_converter)
    register_lsp_features(client)
    return client


@dataclass
class Workspace:
    root: pathlib.Path
    repo: pathlib.Path
    data: pathlib.Path
    env: dict[str, str]
    root_commit: str

    @property
    def uri(self) -> str:
        return self.repo.as_uri()

    @property
    def view_dir(self) -> pathlib.Path:
        return self.repo / ".forge" / "view"


GIT_IDENTITY = {
    "GIT_AUTHOR_NAME": "Forge Test",
    "GIT_AUTHOR_EMAIL": "forge-test@example.invalid",
    "GIT_COMMITTER_NAME": "Forge Test",
    "GIT_COMMITTER_EMAIL": "forge-test@example.invalid",
    "GIT_AUTHOR_DATE": "2024-12-02T12:00:00Z",
    "GIT_COMMITTER_DATE": "2024-12-02T12:00:00Z",
    "GIT_CONFIG_GLOBAL": os.devnull,
    "GIT_CONFIG_NOSYSTEM": "1",
}


@pytest.fixture(scope="session")
def template_repo(tmp_path_factory) -> tuple[pathlib.Path, str]:
    """A git repository with one commit, made once and copied for every test."""
    repo = tmp_path_factory.mktemp("template") / "repo"
    repo.mkdir()
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(repo.parent), **GIT_IDENTITY}
    (repo / "README.md").write_text("# fixture\n")
    _git(repo, env, "init", "-q")
    _git(repo, env, "add", "README.md")
    _git(repo, env, "commit", "-q", "-m", "initial commit")
    root_commit = subprocess.run(
        ["git", "rev-list", "--max-parents=0", "HEAD"], cwd=repo, env=env, check=True, capture_output=True, text=True
    ).stdout.strip()
    return repo, root_commit


@pytest.fixture
def workspace(tmp_path: pathlib.Path, template_repo) -> Workspace:
    root = tmp_path
    repo, data = root / "repo", root / "data"
    shutil.copytree(template_repo[0], repo, symlinks=True)
    dirs = {name: root / name for name in ("config", "runtime", "home", "xdg-data", "xdg-state", "xdg-cache")}
    for d in [data, *dirs.values()]:
        d.mkdir()
    dirs["runtime"].chmod(0o700)

    keep = {k: v for k, v in os.environ.items() if k in ("PATH", "LANG", "LC_ALL", "TMPDIR", "RUST_BACKTRACE")}
    env = {
        **keep,
        "HOME": str(dirs["home"]),
        "XDG_CONFIG_HOME": str(dirs["config"]),
        "XDG_RUNTIME_DIR": str(dirs["runtime"]),
        "XDG_DATA_HOME": str(dirs["xdg-data"]),
        "XDG_STATE_HOME": str(dirs["xdg-state"]),
        "XDG_CACHE_HOME": str(dirs["xdg-cache"]),
        "GIT_CONFIG_GLOBAL": os.devnull,
        "GIT_CONFIG_NOSYSTEM": "1",
        "FORGE_LOG": os.environ.get("FORGE_LOG", "warn"),
    }
    return Workspace(root=root, repo=repo, data=data, env=env, root_commit=template_repo[1])


@dataclass
class Session:
    """A started, initialized server with its client."""

    client: LanguageClient
    result: types.InitializeResult
    caps: types.ClientCapabilities
    # URIs of the workspace/textDocumentContent/refresh requests received, in order.
    refreshes: list[str] = field(default_factory=list)

    @property
    def session_id(self) -> str:
        return self.result.capabilities.experimental["forge"]["sessionId"]

    @property
    def plan_uri(self) -> str:
        return f"forge://plan/session/{self.session_id}.md"


class Servers:
    """Starts servers for one test and shuts them all down at teardown."""

    def __init__(self, workspace: Workspace):
        self.workspace = workspace
        self.sessions: list[Session] = []

    async def start(
        self,
        caps: types.ClientCapabilities,
        *,
        forge: dict[str, Any] | None = None,
    ) -> Session:
        """Starts a server and initializes it; ``forge`` is merged into
        ``initializationOptions.forge`` (``agent: user`` and ``dataDir`` by default)."""
        ws = self.workspace
        config = ClientServerConfig(
            server_command=[server_binary(), "--data-dir", str(ws.data)],
            server_env=ws.env,
            client_factory=make_client,
        )
        client = await config.start()
        assert isinstance(client, LanguageClient)
        session = Session(client=client, result=None, caps=caps)  # type: ignore[arg-type]

        @client.feature(types.WORKSPACE_TEXT_DOCUMENT_CONTENT_REFRESH)
        def _refresh(params: types.TextDocumentContentRefreshParams):
            session.refreshes.append(params.uri)
            return None

        options = {"forge": {"agent": "user", "dataDir": str(ws.data), **(forge or {})}}
        try:
            session.result = await asyncio.wait_for(
                client.initialize_session(
                    types.InitializeParams(
                        capabilities=caps,
                        root_uri=ws.uri,
                        workspace_folders=[types.WorkspaceFolder(uri=ws.uri, name="repo")],
                        initialization_options=options,
                    )
                ),
                WAIT,
            )
        except BaseException:
            await stop_client(client, initialized=False)
            raise
        self.sessions.append(session)
        return session

    async def close(self) -> None:
        sessions, self.sessions = self.sessions, []
        for s in reversed(sessions):
            await stop_client(s.client, initialized=True)


async def stop_client(client: LanguageClient, *, initialized: bool) -> None:
    """Ends the server: ``shutdown`` + ``exit`` (or only ``exit`` when initialize failed), then
    waits for the process; kills it (our own child, by its handle) if it does not exit."""
    server = client._server
    try:
        if initialized:
            await asyncio.wait_for(client.shutdown_session(), WAIT)
        elif server is not None and server.returncode is None:
            client.exit(None)
        if server is not None and server.returncode is None:
            await asyncio.wait_for(server.wait(), WAIT)
    finally:
        if server is not None and server.returncode is None:
            server.kill()
            await server.wait()
        await asyncio.wait_for(client.stop(), WAIT)


@pytest_asyncio.fixture
async def servers(workspace: Workspace):
    fs = Servers(workspace)
    yield fs
    await fs.close()


@pytest.fixture(params=CLIENTS)
def client_name(request) -> str:
    return request.param


@pytest.fixture
def client_caps(client_name: str) -> types.ClientCapabilities:
    return capabilities(client_name)


@pytest_asyncio.fixture
async def forge(servers: Servers, client_caps: types.ClientCapabilities) -> Session:
    """One server, initialized as agent ``user`` with the parametrized client's capabilities."""
    return await servers.start(client_caps)


# --- helpers ------------------------------------------------------------------------------


async def run(client: LanguageClient, tool: str, args: dict[str, Any] | None = None) -> dict[str, Any]:
    """``workspace/executeCommand forge.<tool>``; returns ``{text, data}`` as plain JSON."""
    params = types.ExecuteCommandParams(command=f"forge.{tool}", arguments=None if args is None else [args])
    result = await asyncio.wait_for(client.workspace_execute_command_async(params), WAIT)
    return as_json(result)


def as_json(value: Any) -> Any:
    """Converts pygls' namedtuple-like objects (params of methods it does not know) to JSON."""
    if hasattr(value, "_asdict"):
        return {k: as_json(v) for k, v in value._asdict().items()}
    if isinstance(value, dict):
        return {k: as_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [as_json(v) for v in value]
    return value


async def content(client: LanguageClient, uri: str) -> str:
    result = await asyncio.wait_for(
        client.workspace_text_document_content_async(types.TextDocumentContentParams(uri=uri)), WAIT
    )
    return result.text


async def eventually(predicate, timeout: float = WAIT, interval: float = 0.02):
    """Polls ``predicate`` until it returns a truthy value; returns that value."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if loop.time() > deadline:
            raise AssertionError(f"condition not met within {timeout}s: {getattr(predicate, '__doc__', None) or predicate}")
        await asyncio.sleep(interval)


def js_len(text: str) -> int:
    """Length in UTF-16 code units (the protocol's "chars")."""
    return len(text.encode("utf-16-le")) // 2


def utf8_or_16(line: str, utf8: bool) -> int:
    return len(line.encode("utf-8")) if utf8 else js_len(line)


def rpc_error(exc: JsonRpcException) -> tuple[int, str, Any]:
    """``(code, message, data)`` of a JSON-RPC error."""
    return exc.code, exc.message, as_json(exc.data)


async def expect_error(awaitable, code: int, kind: str) -> str:
    """Awaits a request that must fail with ``code`` and ``data.kind``; returns the message."""
    with pytest.raises(JsonRpcException) as info:
        await awaitable
    got_code, message, data = rpc_error(info.value)
    assert (got_code, data) == (code, {"kind": kind}), f"got {got_code} {data}: {message}"
    return message


# --- plans used across the suite ------------------------------------------------------------

# Two sections, every required heading present and filled: no structure warnings.
COMPLETE_PLAN = """\
# Add OAuth

## Objective
Add OAuth login to the API.

Loop Name: add-oauth

<!-- forge-section -->
## Phase 1: Token store

### Files
- src/tokens.rs

### Edits
- add the token store

### Acceptance Criteria
- tokens persist across restarts

### Verification
- cargo test tokens

<!-- forge-section -->
## Phase 2: Login flow

### Files
- src/login.rs

### Edits
- add the login endpoint

### Acceptance Criteria
- a user can log in

### Verification
- cargo test login

## Decisions
- use PKCE

## Conventions
- snake_case modules

## Key Context
- the API is axum based
"""

# One empty marker, a second section missing three required headings, two missing trailing
# headings: warnings 3, 7 and 8 of FORGE-REFERENCE §3.5, in that order.
WARN_PLAN = """\
# Add OAuth

## Objective
Add OAuth login to the API.

Loop Name: add-oauth

<!-- forge-section -->

<!-- forge-section -->
## Phase 1: Token store
### Files
- src/tokens.rs
### Edits
- add the token store
### Acceptance Criteria
- tokens persist
### Verification
- cargo test tokens

<!-- forge-section -->
## Phase 2: Login flow
### Files
- src/login.rs

## Decisions
- use PKCE
"""

WARN_PLAN_WARNINGS = [
    "1 section marker(s) have empty bodies and will be skipped.",
    "Section 2 is missing required headings: Edits, Acceptance Criteria, Verification.",
    "Plan is missing trailing headings: Conventions, Key Context.",
]


def line_of(text: str, needle: str) -> int:
    """0-based index of the first line equal to ``needle``."""
    return text.split("\n").index(needle)


def diagnostics_of(client: LanguageClient, uri: str) -> list[types.Diagnostic] | None:
    """The last diagnostics published for ``uri`` (a list), or None when none were."""
    published = client.diagnostics.get(uri)
    return None if published is None else list(published)
