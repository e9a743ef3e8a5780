"""The API's types, generated from proto-docs/openapi.json by tools/generate_models.py.

Do not edit: run `python tools/generate_models.py`. A test fails when this file is stale.
"""

from __future__ import annotations

from typing import Any, Literal, NotRequired, TypedDict

from .errors import SandboxApiError

API_VERSION = "0.1.0"
"""The `info.version` of the document these types come from."""


class ArchivePutResponse(TypedDict):
    """The answer of `PUT /v1/workspace/archive`."""
    n_bytes: int
    n_files: int


class Artifact(TypedDict):
    """The full bytes of one output stream, kept on the server: `GET /v1/artifacts/{id}`."""
    capped: bool
    """Whether the stream printed more than the artifact cap, so the artifact holds a prefix."""
    id: str
    invalid_utf8: bool
    """Whether the stream held invalid UTF-8, replaced by U+FFFD in the text field."""
    sha256: str
    """Hex sha256 of the stored bytes."""
    size: int
    """Bytes stored in the artifact (at most the artifact cap)."""
    total_bytes: int
    """Bytes the command printed on this stream; larger than `size` when `capped`."""
    truncated: bool
    """Whether the text field was cut for the model."""


class BashArgs(TypedDict):
    """Arguments of `bash`."""
    cmd: str
    """The shell command, run by `bash -c` from the workspace root; not empty, no NUL byte."""
    timeout: NotRequired[int | None]
    """Timeout in seconds, 1 to 3600; 120 when absent or null."""


class BashResult(TypedDict):
    """The result of `bash`. A non-zero exit or a timeout is a result, not an error."""
    background_pids: list[int]
    """Processes the command left running after the shell exited (see `GET /v1/processes`)."""
    call_id: str
    """The id of this call, also found on its processes in `GET /v1/processes`."""
    duration_ms: int
    """Wall-clock time from spawn to return, in milliseconds."""
    exit_code: int
    """The shell's exit status; 128 + N when a signal N ended it."""
    output: str
    """The model-facing text: `exit=N`, then `stdout:` and `stderr:` blocks indented by two spaces."""
    signal: NotRequired[int | None]
    """The signal that ended the shell, if one did."""
    stderr: str
    """Standard error as text, cut for the model (see `stderr_artifact` for all of it)."""
    stderr_artifact: "Artifact"
    stdout: str
    """Standard output as text, cut for the model (see `stdout_artifact` for all of it)."""
    stdout_artifact: "Artifact"
    timed_out: bool
    """Whether the timeout fired and the command's processes were killed."""


class BashResultWithStep(BashResult):
    """The result of `bash`, with `step` when `since`, `fingerprint` or `inline_max_bytes` asked for it"""
    step: NotRequired["ToolStep"]


ChangeKind = Literal["added", "modified", "deleted", "mode_changed", "type_changed"]
"""How a path differs between two snapshots."""


class ChangesResponse(TypedDict):
    """The answer of `GET /v1/workspace/changes?since=ID`."""
    changes: list["FileChange"]
    since: str
    skipped: NotRequired[list["SkippedPath"]]
    """Paths the new snapshot left out (see `SnapshotResponse.skipped`)."""
    snapshot_id: str
    """A new snapshot of the state these changes lead to; pass it as the next `since`."""


class DirEntry(TypedDict):
    """One entry of `GET /v1/dirs/{path}`."""
    kind: "EntryKind"
    """Symlinks are not followed."""
    name: str
    size: int
    """Size in bytes (of the link itself for a symlink)."""


class DirListing(TypedDict):
    """The answer of `GET /v1/dirs/{path}`: the entries sorted by name."""
    entries: list["DirEntry"]
    path: str
    """The path as given."""


class DroppedOutput(TypedDict):
    """Chunks after the reader's cursor that the buffer no longer holds (they are in the
    process's artifacts once it ends).
    """
    bytes: int
    """Their bytes: exact, unless the reader is more than 8192 chunks behind the buffer's
    start, when it counts those since the oldest drop the server remembers.
    """
    from_seq: int
    """The first and last dropped chunk numbers, inclusive."""
    to_seq: int


Encoding = Literal["utf8", "base64"]
"""How a chunk's `data` is written."""


EntryKind = Literal["file", "dir", "symlink", "other"]
"""What a path is. Symlinks are never followed."""


class ErrorBody(TypedDict):
    """What went wrong: a stable machine-readable type and a message for people."""
    message: str
    """A human-readable explanation naming what was wrong."""
    type: "ErrorType"
    """A stable snake_case identifier, for example `outside_workspace` or `invalid_arguments`."""


class ErrorResponse(TypedDict):
    """The body of every 4xx and 5xx answer."""
    error: "ErrorBody"


ErrorType = Literal["unauthorized", "missing_scope", "unknown_tool", "not_found", "file_not_found", "process_not_found", "process_conflict", "method_not_allowed", "bad_request", "outside_workspace", "not_a_regular_file", "not_a_directory", "permission_denied", "foreign_origin", "unsupported_media_type", "payload_too_large", "invalid_arguments", "binary_file", "no_match", "multiple_matches", "idempotency_in_progress", "idempotency_key_reused", "overloaded", "spawn_failed", "io_error", "internal"]
"""Every error type the server sends. Clients match on these; a newer server's type that this
version does not know reads as `unknown`.
"""


class ExecArgs(TypedDict):
    """Arguments of `exec` (an opt-in tool): start a command and return after it ends or after
    `yield_ms`, whichever is first, with its output so far.
    """
    cmd: str
    """The shell command, run by `bash -c` from the workspace root; not empty, no NUL byte."""
    tty: NotRequired[bool]
    """Run it under a terminal (for programs that want one: REPLs, editors, pagers)."""
    yield_ms: NotRequired[int | None]
    """How long to wait for it before answering with what it printed so far, in
    milliseconds, 0 to 300000 (10000 when absent).
    """


class ExecResult(TypedDict):
    """The result of `exec` and `write_stdin`."""
    exit_code: NotRequired[int | None]
    """Set once it has ended."""
    last_seq: int
    """The cursor after this look (see `GET /v1/processes/{id}/output`)."""
    new_output: str
    """The new output, cut for the model as `output` is (stdout and stderr together, in the order the server read them: lines printed on the two streams at the same moment may swap)."""
    output: str
    """The model-facing text: `exit=N` or `running: …`, then the output since the last look."""
    process_id: str
    running: bool


class ExecResultWithStep(ExecResult):
    """The result of `write_stdin`, with `step` when `since`, `fingerprint` or `inline_max_bytes` asked for it"""
    step: NotRequired["ToolStep"]


class FileChange(TypedDict):
    """What happened to one path between two snapshots."""
    after: NotRequired[dict[str, Any] | "FileVersion"]
    before: NotRequired[dict[str, Any] | "FileVersion"]
    change: "ChangeKind"
    path: str
    path_b64: NotRequired[str | None]
    """The path's exact bytes in base64, present only when they are not UTF-8."""


class FilePutResponse(TypedDict):
    """The answer of `PUT /v1/files/{path}`."""
    bytes_written: int
    created: bool
    """Whether the file did not exist before (the status is then 201)."""
    notes: NotRequired[list[str]]
    """What the server did otherwise than asked: set-user-id and set-group-id bits of `mode`
    are never set (no file where commands run is set-id).
    """
    path: str


class FileVersion(TypedDict):
    """One version of a path in a manifest or a change."""
    kind: "EntryKind"
    mode: int
    """Permission bits, e.g. 420 (0o644)."""
    sha256: NotRequired[str | None]
    """Hex sha256 of a file's content; its bytes are at `GET /v1/blobs/{sha256}`. A sparse file
    (fewer bytes on disk than its size) over `--blob-max-file-bytes` is not read: this is
    then a digest of its size, times and inode, which changes whenever the file does, and
    which no blob has.
    """
    size: int
    target: NotRequired[str | None]
    """A symlink's target."""


class FingerprintResponse(TypedDict):
    """The answer of `GET /v1/state/fingerprint`: side effects that tool results do not show."""
    listening: list["ListeningSocket"]
    processes: list["ProcessInfo"]
    watched: list["WatchedPath"]


class HealthResponse(TypedDict):
    """The answer of `GET /healthz`."""
    mtls: NotRequired[bool]
    """Whether a client certificate from the server's CA is required (`--client-ca`)."""
    protections: list["Protection"]
    """The containment of commands, as in force."""
    status: str
    """Always `ok` when the server answers."""
    tls: NotRequired[bool]
    """Whether the server speaks HTTPS (`--tls-cert`); plain HTTP is then refused."""


class InfoResponse(TypedDict):
    """The answer of `GET /v1/info`."""
    file_boundary: NotRequired[str]
    """Where file tools may reach: the workspace root, or `/` when the whole container is the
    boundary (`--files-anywhere`).
    """
    limits: "Limits"
    protections: list["Protection"]
    """The containment of commands, as in force."""
    tools: list[str]
    """The enabled tools, in listing order."""
    version: str
    """The sandbox-server version."""
    workspace_root: str
    """The absolute path of the workspace root on the server's machine."""


class Limits(TypedDict):
    """The limits the server enforces."""
    archive_max_bytes: NotRequired[int]
    """The most bytes a `PUT /v1/workspace/archive` may send and unpack to."""
    archive_max_entries: NotRequired[int]
    """The most entries such an archive may hold."""
    artifact_cap_bytes: int
    """The full output of each stream is kept as an artifact up to this many bytes."""
    artifact_retention_bytes: int
    """Artifacts are evicted, oldest first, when their total size exceeds this."""
    default_timeout_secs: int
    """`bash` timeout when the call gives none, in seconds."""
    durable_writes: NotRequired[bool]
    """Whether written files are fsynced before they replace the old ones (`--durable-writes`);
    writes are atomic either way.
    """
    kill_grace_ms: int
    """After SIGTERM, how long a timed-out command's processes get before SIGKILL, in milliseconds."""
    max_body_bytes: int
    """Request bodies larger than this are refused with 413."""
    max_concurrent_calls: int
    """Tool calls running at once; one more is refused with 429."""
    max_followers: NotRequired[int]
    """Followers of process output at once (event streams, WebSockets, waiting long-polls);
    one more is refused with 429.
    """
    max_inflight_body_bytes: NotRequired[int]
    """Bytes of request bodies held in memory at once over every route; past it a request
    waits, then gets 429. File and archive uploads stream and count for nothing here.
    """
    max_timeout_secs: int
    """The largest `bash` timeout a call may ask for, in seconds."""
    output_limit_chars: int
    """Model-facing text (`output`, `stdout`, `stderr`) is cut to this many characters."""
    read_file_page_bytes: NotRequired[int]
    """The most bytes of lines `read_file` gathers for one page (the rest are counted only)."""
    scan_max_entries: NotRequired[int]
    """The most paths a snapshot, a change list or `GET /v1/workspace/archive` may find in the
    workspace, and the most entries one folder's listing may hold; past it they stop (413).
    """


class ListeningSocket(TypedDict):
    """A listening socket in the sandbox's network namespace."""
    address: str
    pid: NotRequired[int | None]
    """The pid that holds it, when it is one of the server's processes."""
    port: int
    protocol: "SocketProtocol"


class ManagedProcess(TypedDict):
    """A managed process as it is now."""
    artifacts: list["StreamArtifact"]
    """Once it has ended: the whole of each stream it printed on, kept as an artifact up to
    the artifact cap (`GET /v1/artifacts/{id}`), whatever left the buffer.
    """
    cmd: str
    cwd: NotRequired[str | None]
    """While it runs: the folder its `bash` is in, relative to the workspace root when inside
    it (`.` for the root), absolute otherwise (a persistent shell that ran `cd ~`).
    """
    dropped_bytes: int
    """Bytes of output dropped from the buffer so far (still counted in the totals above)."""
    ended_at: NotRequired[str | None]
    exit_code: NotRequired[int | None]
    """Set once it has ended; 128 + N when signal N ended it."""
    first_seq: int
    """The oldest chunk the buffer still holds; older ones were dropped to bound memory."""
    id: str
    kind: "ProcessKind"
    last_seq: int
    """The newest chunk's number (0 before any output): pass it as `after_seq` to wait for
    what comes next.
    """
    pid: int
    """The pid of its `bash`."""
    pty_bytes: int
    signal: NotRequired[int | None]
    started_at: str
    """RFC 3339 UTC."""
    state: "ProcessState"
    stderr_bytes: int
    stdin_open: bool
    """Whether its standard input is still open (never for a shell, whose input is its runs)."""
    stdout_bytes: int
    """Bytes it printed, per stream."""
    tty: NotRequired[dict[str, Any] | "TtySize"]


class ManifestEntry(FileVersion):
    """One path of a manifest."""
    path: str
    """Relative to the workspace root, `/`-separated. A name that is not UTF-8 shows each
    such byte as `\\\\xHH`; `path_b64` then holds the exact bytes.
    """
    path_b64: NotRequired[str | None]
    """The path's exact bytes in base64, present only when they are not UTF-8."""


class ManifestResponse(TypedDict):
    """The answer of `GET /v1/workspace/snapshots/{id}`: every path, sorted."""
    entries: list["ManifestEntry"]
    snapshot_id: str


class TokenInfo(TypedDict):
    """A minted token as the server lists it: never its secret."""
    created_at: str
    """RFC 3339."""
    expired: bool
    """Whether `expires_at` has passed."""
    expires_at: str
    """RFC 3339; from then on the token is refused with 401."""
    id: str
    """`tok_` and 16 hexadecimal digits; the audit log names the token by it."""
    minted_by: str
    """The id of the token that minted it, or `root`."""
    name: str
    scopes: list["Scope"]


class MintedToken(TokenInfo):
    """The answer of `POST /v1/tokens`: the token itself, shown this once (the server keeps only
    its SHA-256), with what the list shows of it.
    """
    token: str
    """The secret, for `Authorization: Bearer …`: `sbt_`, the id's 16 digits, `_`, and 64
    random hexadecimal digits.
    """


class OutputChunk(TypedDict):
    """One numbered chunk of output."""
    data: str
    encoding: "Encoding"
    offset: int
    """Where the chunk starts in its stream, in bytes."""
    seq: int
    """Numbers start at 1 and have no gaps across a process's streams."""
    stream: "OutputStream"


OutputStream = Literal["stdout", "stderr", "pty"]
"""The stream a chunk of output came from."""


class PathInfo(TypedDict):
    """The answer of `GET /v1/paths/{path}`: where a path leads, its symlinks followed as the file
    tools follow them. A command that reads the path reads what is there: the policy asks
    before it lets `cat notes.txt` read a link to a home.
    """
    kind: NotRequired[dict[str, Any] | "EntryKind"]
    leads_to: NotRequired[str | None]
    """Where the path, or a symlink on its way, leads out of the workspace: an absolute path,
    `..` resolved by name. Absent when it stays inside.
    """
    path: str
    """The path as given."""


class ProcessInfo(TypedDict):
    """A live process that the server started, directly or as a descendant of a command."""
    call_id: NotRequired[str | None]
    """The `bash` call that started it, when known."""
    command: str
    """The command line, arguments joined by spaces."""
    foreground: bool
    """Whether the call that started it is still running (a foreground process) or has returned."""
    pgid: int
    """The process group id."""
    pid: int
    ppid: int
    """The parent process id; the server's own pid for orphans it adopted."""
    started_at: str
    """When the process started, RFC 3339 UTC."""


class ProcessKillResponse(TypedDict):
    """The answer of `DELETE /v1/processes` and `DELETE /v1/processes/{id}`."""
    commands: NotRequired[list[str]]
    """The command line of each, read before its signal, in the order of `killed`."""
    forced: bool
    """Whether any of them needed SIGKILL after the grace period."""
    killed: list[int]
    """Every process that was signalled: the one named and its descendants."""


ProcessKind = Literal["command", "shell", "call"]
"""What a managed process is."""


class ProcessListResponse(TypedDict):
    """The answer of `GET /v1/processes`."""
    managed: NotRequired[list["ManagedProcess"]]
    """The processes and shells started by id (`POST /v1/processes`, `POST /v1/shells`), the
    ended ones included until they are deleted.
    """
    processes: list["ProcessInfo"]
    """Every live operating-system process the server started."""


class ProcessOutput(TypedDict):
    """The answer of `GET /v1/processes/{id}/output`."""
    chunks: list["OutputChunk"]
    done: bool
    """Whether the process has ended and everything it printed has been returned."""
    dropped: NotRequired[dict[str, Any] | "DroppedOutput"]
    next_after_seq: int
    """The cursor for the next read: the last chunk returned (or skipped as dropped), or
    `after_seq` when there was nothing new.
    """
    process: "ManagedProcess"


ProcessState = Literal["running", "exited", "killed", "timed_out"]
"""Where a managed process is in its life."""


class Protection(TypedDict):
    """One layer of containment and whether it is in force."""
    active: bool
    detail: str
    """What it does here, or why it could not be applied."""
    name: "ProtectionName"


ProtectionName = Literal["process_group", "clean_environment", "resource_limits", "unprivileged_user", "landlock", "network_none", "network_namespace", "cgroup", "pid_namespace", "devices", "signal_scope", "not_dumpable", "hidden_home", "no_set_id"]
"""The layers of containment a server reports."""


PtyClientMessage = dict[str, Any]
"""What a client sends on `GET /v1/processes/{id}/pty` (a WebSocket) as a text frame; a binary
frame is input bytes as they are.
"""


PtyServerMessage = dict[str, Any]
"""What the server sends on `GET /v1/processes/{id}/pty`, one text frame each. After `exit`
the server closes the socket.
"""


class ReadFileArgs(TypedDict):
    """Arguments of `read_file`."""
    limit: NotRequired[int | None]
    """Lines to return, 1 to 100000; 2000 when absent or null."""
    offset: NotRequired[int | None]
    """Lines to skip from the start; 0 when absent or null."""
    path: str
    """Path relative to the workspace root."""


class ReadFileResult(TypedDict):
    """The result of `read_file`."""
    first_line: int
    """The number of the first line returned (1-based); `offset + 1`."""
    lines_returned: int
    """Lines returned in this page."""
    output: str
    """Numbered lines, `{n:4}: text`, then a line saying where this page sits in the file."""
    path: str
    """The path as given."""
    total_lines: int
    """Lines in the whole file."""
    truncated: bool
    """Whether `output` was cut to the output limit."""


class ReadFileResultWithStep(ReadFileResult):
    """The result of `read_file`, with `step` when `since`, `fingerprint` or `inline_max_bytes` asked for it"""
    step: NotRequired["ToolStep"]


class ResetResponse(TypedDict):
    """The answer of `POST /v1/reset`."""
    killed: list[int]
    """The pids of the processes killed."""
    n_removed: int
    """The entries removed from the workspace root."""


Scope = Literal["read", "write", "run", "admin", "observe"]
"""What a token may do. The server's own token (`--token-file`) holds every scope; a minted
token holds those it was given, and may mint only tokens with scopes it holds itself.
"""


class SearchReplaceArgs(TypedDict):
    """Arguments of `search_replace`."""
    path: str
    """Path relative to the workspace root."""
    replace: str
    """The text that replaces it."""
    search: str
    """Exact text that must occur exactly once in the file; not empty."""


class SearchReplaceResult(TypedDict):
    """The result of `search_replace`."""
    bytes_written: int
    """The size of the file after the replacement."""
    output: str
    """`OK`."""
    path: str


class SearchReplaceResultWithStep(SearchReplaceResult):
    """The result of `search_replace`, with `step` when `since`, `fingerprint` or `inline_max_bytes` asked for it"""
    step: NotRequired["ToolStep"]


class ShellRunRequest(TypedDict):
    """`POST /v1/shells/{id}/run`: one command in the shell, which keeps its working directory,
    variables and functions for the next.
    """
    cmd: str
    timeout: NotRequired[int | None]
    """Seconds, 1 to 3600 (the server's default when absent); at the timeout the command is
    interrupted as by Ctrl-C, and the shell lives on.
    """


class ShellRunResult(BashResult):
    """The answer of `POST /v1/shells/{id}/run`: what `bash` answers, and the shell's part."""
    interrupted: bool
    """Whether `POST /v1/shells/{id}/interrupt` (or the timeout) interrupted the command."""
    shell_alive: bool
    """Whether the shell is still there for the next command (a command may `exit` it)."""


class ShellRunResultWithStep(ShellRunResult):
    """The result of `shell`, with `step` when `since`, `fingerprint` or `inline_max_bytes` asked for it"""
    step: NotRequired["ToolStep"]


SignalName = Literal["INT", "TERM", "KILL", "HUP", "QUIT", "USR1", "USR2", "STOP", "CONT", "WINCH"]
"""The signals a client may send."""


class SignalRequest(TypedDict):
    """`POST /v1/processes/{id}/signal`."""
    signal: "SignalName"


class SkippedPath(TypedDict):
    """A path a walk left out, and why."""
    path: str
    path_b64: NotRequired[str | None]
    """The path's exact bytes in base64, present only when they are not UTF-8."""
    reason: str


class SnapshotResponse(TypedDict):
    """The answer of `POST /v1/workspace/snapshot`."""
    n_bytes: int
    n_files: int
    n_hashed: int
    """Files whose content was read and hashed for this snapshot (the rest were unchanged, or
    sparse and over `--blob-max-file-bytes`, which are not read).
    """
    skipped: NotRequired[list["SkippedPath"]]
    """Paths left out: changed while they were walked (a folder swapped for a symlink, a file
    for a FIFO), or unreadable.
    """
    snapshot_id: str
    taken_at: str


SocketProtocol = Literal["tcp", "tcp6"]
"""The protocol of a listening socket."""


class SseEvent(TypedDict):
    """One Server-Sent Event of `GET /v1/processes/{id}/events`, as its fields."""
    data: str
    """A JSON document, by `event`."""
    event: "SseEventName"
    id: str
    """The number of the last chunk it covers: send it back as `Last-Event-ID` to resume."""


SseEventName = Literal["output", "dropped", "exit", "error"]
"""What an event is about, on `GET /v1/processes/{id}/events`."""


class StartProcessRequest(TypedDict):
    """`POST /v1/processes`: start a command under an id."""
    cmd: str
    """Run by `bash -c`; not empty, no NUL byte."""
    cwd: NotRequired[str | None]
    """The working directory, relative to the workspace root (default: the root)."""
    env: NotRequired[dict[str, str]]
    """Variables added to the commands' environment: names of letters, digits and `_` not starting with a digit, except the server's markers (SANDBOX_CALL_ID, SANDBOX_SERVER_ID); values without a NUL byte."""
    id: str
    """The client's name for the process, 1 to 64 characters (see the pattern). Starting the
    same id with the same body again answers with the process as it is now; with a
    different body it is refused with 409.
    """
    timeout: NotRequired[int | None]
    """Seconds until the process and everything it started are killed, 1 to 86400; without
    one it runs until it ends, is deleted or the server stops. No client's connection
    (or lack of one) ever ends it.
    """
    tty: NotRequired[dict[str, Any] | "TtySize"]


class StartShellRequest(TypedDict):
    """`POST /v1/shells`: start a persistent shell."""
    cwd: NotRequired[str | None]
    env: NotRequired[dict[str, str]]
    """Variables added to the commands' environment: names of letters, digits and `_` not starting with a digit, except the server's markers (SANDBOX_CALL_ID, SANDBOX_SERVER_ID); values without a NUL byte."""
    id: str
    """As for a process."""


class StdinRequest(TypedDict):
    """`POST /v1/processes/{id}/stdin`."""
    close: NotRequired[bool]
    """Close standard input after writing (the program sees end of file)."""
    data: NotRequired[str]
    """What to write (may be empty, to only close)."""
    encoding: NotRequired["Encoding"]


class StdinResponse(TypedDict):
    """The answer of `POST /v1/processes/{id}/stdin`."""
    stdin_open: bool
    written: int


class StreamArtifact(TypedDict):
    """One stream's artifact."""
    artifact: "Artifact"
    stream: "OutputStream"


class TokenList(TypedDict):
    """The answer of `GET /v1/tokens`: the tokens that are neither revoked nor long expired
    (an expired token is listed for a day after its expiry), newest first.
    """
    tokens: list["TokenInfo"]


class TokenRequest(TypedDict):
    """The body of `POST /v1/tokens`."""
    name: str
    """What the token is for, for people reading the list and the audit log (1 to 64
    characters: letters, digits, `-`, `_`, `.`, `:`, `@`).
    """
    scopes: list["Scope"]
    """One or more scopes; each must be held by the token that mints it."""
    ttl_secs: int
    """Seconds until the token expires: 1 to 31,536,000 (a year), and never past the expiry
    of the token that mints it.
    """


class TokenRevoked(TypedDict):
    """The answer of `DELETE /v1/tokens/{id}`."""
    id: str
    revoked: bool
    """Always true: the next request with the token is refused."""
    with_it: NotRequired[list[str]]
    """The tokens it minted, and those they minted, revoked with it: a token is valid only
    while the one that minted it is.
    """


class ToolSpec(TypedDict):
    """One tool, as a model API expects it: name, description and the JSON Schema of its arguments."""
    description: str
    name: str
    parameters: dict[str, Any]
    """JSON Schema (draft 2020-12 subset) of the tool's arguments object."""


class ToolStep(TypedDict):
    """What a tool call's caller needs to record the step, returned with the tool's result (as
    `step`) when `POST /v1/tools/{name}` asks for it: one round trip instead of a call followed
    by changes, blobs, artifacts and the fingerprint.
    """
    changes: NotRequired[dict[str, Any] | "ChangesResponse"]
    fingerprint: NotRequired[dict[str, Any] | "FingerprintResponse"]
    inline: NotRequired[dict[str, str]]
    """Bytes up to `?inline_max_bytes` each, base64, by hex sha256: the new file versions in
    `changes` and the output streams of a command. Anything not here is at
    `GET /v1/blobs/{sha256}` or `GET /v1/artifacts/{id}`.
    """


class TtySize(TypedDict):
    """The size of a pseudo-terminal."""
    cols: int
    rows: int


WatchedKind = Literal["file", "dir", "symlink", "other", "missing"]
"""What a watched path is now."""


class WatchedPath(TypedDict):
    """A watched path outside the workspace and the hash of what is there."""
    kind: "WatchedKind"
    path: str
    sha256: NotRequired[str | None]
    """A file's sha256; for a folder, the sha256 of its sorted listing of names and hashes."""


class WriteFileArgs(TypedDict):
    """Arguments of `write_file`."""
    content: str
    """The whole new content of the file."""
    path: str
    """Path relative to the workspace root; missing parent folders are created."""


class WriteFileResult(TypedDict):
    """The result of `write_file`."""
    bytes_written: int
    created: bool
    """Whether the file did not exist before."""
    output: str
    """`wrote N bytes`."""
    path: str


class WriteFileResultWithStep(WriteFileResult):
    """The result of `write_file`, with `step` when `since`, `fingerprint` or `inline_max_bytes` asked for it"""
    step: NotRequired["ToolStep"]


class WriteStdinArgs(TypedDict):
    """Arguments of `write_stdin` (an opt-in tool): send input to a process `exec` started, wait,
    return what it printed since the last look.
    """
    input: NotRequired[str]
    """What to type (a newline runs a line); empty to only wait for more output."""
    process_id: str
    """The `process_id` that `exec` returned."""
    yield_ms: NotRequired[int | None]
    """How long to wait for output before answering, in milliseconds, 0 to 300000 (2000 when
    absent); it answers as soon as the process ends.
    """


class UnauthorizedError(SandboxApiError):
    """The server answered `unauthorized`."""

    type = "unauthorized"


class MissingScopeError(SandboxApiError):
    """The server answered `missing_scope`."""

    type = "missing_scope"


class UnknownToolError(SandboxApiError):
    """The server answered `unknown_tool`."""

    type = "unknown_tool"


class NotFoundError(SandboxApiError):
    """The server answered `not_found`."""

    type = "not_found"


class SandboxFileNotFoundError(SandboxApiError):
    """The server answered `file_not_found`."""

    type = "file_not_found"


class ProcessNotFoundError(SandboxApiError):
    """The server answered `process_not_found`."""

    type = "process_not_found"


class ProcessConflictError(SandboxApiError):
    """The server answered `process_conflict`."""

    type = "process_conflict"


class MethodNotAllowedError(SandboxApiError):
    """The server answered `method_not_allowed`."""

    type = "method_not_allowed"


class BadRequestError(SandboxApiError):
    """The server answered `bad_request`."""

    type = "bad_request"


class OutsideWorkspaceError(SandboxApiError):
    """The server answered `outside_workspace`."""

    type = "outside_workspace"


class NotARegularFileError(SandboxApiError):
    """The server answered `not_a_regular_file`."""

    type = "not_a_regular_file"


class SandboxNotADirectoryError(SandboxApiError):
    """The server answered `not_a_directory`."""

    type = "not_a_directory"


class PermissionDeniedError(SandboxApiError):
    """The server answered `permission_denied`."""

    type = "permission_denied"


class ForeignOriginError(SandboxApiError):
    """The server answered `foreign_origin`."""

    type = "foreign_origin"


class UnsupportedMediaTypeError(SandboxApiError):
    """The server answered `unsupported_media_type`."""

    type = "unsupported_media_type"


class PayloadTooLargeError(SandboxApiError):
    """The server answered `payload_too_large`."""

    type = "payload_too_large"


class InvalidArgumentsError(SandboxApiError):
    """The server answered `invalid_arguments`."""

    type = "invalid_arguments"


class BinaryFileError(SandboxApiError):
    """The server answered `binary_file`."""

    type = "binary_file"


class NoMatchError(SandboxApiError):
    """The server answered `no_match`."""

    type = "no_match"


class MultipleMatchesError(SandboxApiError):
    """The server answered `multiple_matches`."""

    type = "multiple_matches"


class IdempotencyInProgressError(SandboxApiError):
    """The server answered `idempotency_in_progress`."""

    type = "idempotency_in_progress"


class IdempotencyKeyReusedError(SandboxApiError):
    """The server answered `idempotency_key_reused`."""

    type = "idempotency_key_reused"


class OverloadedError(SandboxApiError):
    """The server answered `overloaded`."""

    type = "overloaded"


class SpawnFailedError(SandboxApiError):
    """The server answered `spawn_failed`."""

    type = "spawn_failed"


class IoErrorError(SandboxApiError):
    """The server answered `io_error`."""

    type = "io_error"


class InternalError(SandboxApiError):
    """The server answered `internal`."""

    type = "internal"


ERRORS: dict[str, type[SandboxApiError]] = {"unauthorized": UnauthorizedError, "missing_scope": MissingScopeError, "unknown_tool": UnknownToolError, "not_found": NotFoundError, "file_not_found": SandboxFileNotFoundError, "process_not_found": ProcessNotFoundError, "process_conflict": ProcessConflictError, "method_not_allowed": MethodNotAllowedError, "bad_request": BadRequestError, "outside_workspace": OutsideWorkspaceError, "not_a_regular_file": NotARegularFileError, "not_a_directory": SandboxNotADirectoryError, "permission_denied": PermissionDeniedError, "foreign_origin": ForeignOriginError, "unsupported_media_type": UnsupportedMediaTypeError, "payload_too_large": PayloadTooLargeError, "invalid_arguments": InvalidArgumentsError, "binary_file": BinaryFileError, "no_match": NoMatchError, "multiple_matches": MultipleMatchesError, "idempotency_in_progress": IdempotencyInProgressError, "idempotency_key_reused": IdempotencyKeyReusedError, "overloaded": OverloadedError, "spawn_failed": SpawnFailedError, "io_error": IoErrorError, "internal": InternalError}
"""The exception class of each error `type`."""
