//! The per-loop sandbox (`sandbox.enabled`, `sandbox.mode = "bwrap"`, `sandbox.network`):
//! bubblewrap (`bwrap`), one short-lived sandbox per command.
//!
//! - What a sandboxed command sees: the whole file system read-only (`--ro-bind / /`), a
//!   fresh `/dev` and `/proc`, a private `/tmp` (`TMPDIR=/tmp`), the loop's worktree
//!   read-write at its identical host path, the server's private socket directory
//!   read-only (so `forge-lsp call` works inside, a socket on a read-only mount can still be
//!   connected to, and nothing inside can move the socket and listen on its path in its
//!   place; a per-process directory that holds only the socket, `forge_core::paths`, never
//!   a `--listen` socket's directory), and `<worktree>/.forge` read-only (the
//!   shims below run on the host, so a sandboxed command must not be able to rewrite them).
//!   Every namespace is unshared (`--unshare-all`): no network unless the loop was started
//!   with `sandbox.network = true` (`--share-net`); loopback inside is a fresh namespace.
//!   `FORGE_SANDBOX=1` is set inside. `--die-with-parent` ties the sandbox to its caller.
//! - Hidden, because a socket on a read-only mount can still be connected to and the daemons
//!   behind them act on the host ([`hidden_dirs`], [`hidden_sockets`]): the user runtime
//!   directories (`/run/user`, the server's own `$XDG_RUNTIME_DIR`: the session bus, whose
//!   `systemd-run --user` would start any command outside the sandbox, the agents of ssh
//!   and gpg, Wayland, PipeWire, rootless Podman) are empty tmpfs, and the Docker and Podman
//!   system sockets are `/dev/null`. Abstract Unix sockets (an X server's) are per network
//!   namespace: unreachable unless the loop shares the network.
//! - What runs sandboxed: `forge.shell` commands (`sh -c`), and every shell the agent starts
//!   through `PATH` or `$SHELL`: at loop start and restart the engine writes the shims
//!   `<dataDir>/shims/<hash>/{sh,bash}` ([`shim_dir`], [`Sandbox::write_shim`]) and the command host puts
//!   that directory first on the agent's `PATH` and sets `SHELL=<dir>/sh`. The agent process
//!   itself runs on the host (its own file reads, writes and edits are host operations); so
//!   does an agent script whose shebang is `#!/usr/bin/env bash`, which finds the shim: such
//!   a script runs sandboxed as a whole.
//! - Per loop, persisted: `loops.sandbox` and `loops.sandbox_network` are set at loop start
//!   from the configuration; a restart recreates the shims from those columns, not from the
//!   current configuration (seeds: "Restart Semantics").
//! - Nothing persistent to stop: each command is its own sandbox (a `bwrap` process tree)
//!   that ends with the command. A turn's shells are in the agent's process group, which
//!   cancel, termination and shutdown kill; `forge.shell` kills its own group on timeout.
//!   So cancel, completion and termination have no sandbox step.
//! - `FORGE_BWRAP=<path>` (server environment) overrides the `bwrap` found on `PATH`; an
//!   unusable path makes the sandbox unavailable (used by the tests to simulate a host
//!   without bubblewrap).
//! - Catch: as root, a writable bind of a directory owned by another uid is not writable
//!   inside the sandbox (no DAC override in the user namespace): the worktree must be owned
//!   by the user running the server (it is: the server creates it).
//! - Not writable inside: the repository's `.git` (a worktree's index and objects live
//!   there), so `git add`/`git commit` fail in a sandboxed shell; the engine's checkpoint
//!   commits run on the host.

use std::ffi::{OsStr, OsString};
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use forge_protocol::{CommandResult, ToolError};
use serde_json::json;
use tokio::io::AsyncReadExt;

use super::Engine;
// The home directory where the default secret paths are.
use forge_core::project::home;
use forge_core::ToolEnv;

pub use crate::secrets::Secrets;

/// Overrides the `bwrap` binary (server environment).
pub const BWRAP_ENV: &str = "FORGE_BWRAP";
/// Set to `1` inside a sandbox; a shim started inside runs the real shell directly.
pub use crate::process::INSIDE_ENV;
/// `forge.shell`: default and maximum timeout, and the cap of each output stream.
pub const DEFAULT_TIMEOUT_MS: u64 = 120_000;
pub const MAX_TIMEOUT_MS: u64 = 600_000;
pub const OUTPUT_CAP: usize = 1024 * 1024;

const HOW_TO_FIX: &str = "Install bubblewrap (apt-get install bubblewrap, or your distribution's bubblewrap package), or set sandbox.enabled = false to run loops in their worktree without a sandbox.";

/// The sandbox of one loop.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sandbox {
    pub worktree: PathBuf,
    pub network: bool,
    /// The server's private socket directory, bound read-only so `forge-lsp call` works
    /// inside (connecting to a socket needs no write access to its mount) while nothing
    /// inside can rename, replace or remove the socket: a sandboxed process that listened
    /// on its path would receive other sessions' tokens.
    pub socket_dir: Option<PathBuf>,
    /// Extra read-write directories (an agent CLI run whole in the sandbox: its own
    /// state directories).
    pub binds: Vec<PathBuf>,
    /// Extra read-only paths: the agent program when it is a file outside the visible
    /// tree (a script under `/tmp`, which the private `/tmp` would hide), a plugin tool's
    /// folder (which may be under `/tmp` too).
    pub ro_binds: Vec<PathBuf>,
    /// Read-only folders of an agent CLI installed where the sandbox hides it (under
    /// `/tmp` or a runtime directory, [`install_binds`]), bound before the secrets are
    /// hidden, so that a secret inside one stays hidden.
    pub install_dirs: Vec<PathBuf>,
    /// Links in hidden folders on the way to that CLI, made again inside (after its binds),
    /// (where, target as written) ([`Install::links`]).
    pub install_links: Vec<(PathBuf, PathBuf)>,
    /// The user's secrets the sandbox hides ([`Secrets`]): the defaults unless the
    /// configuration says otherwise ([`Sandbox::with_secrets`]).
    pub secrets: Secrets,
    /// The server's data directory, when known ([`Sandbox::with_shims`]): its
    /// `agent-homes` (other loops' copies of the agent CLIs' logins) is hidden too.
    pub data_dir: Option<PathBuf>,
    /// Secret-named variables a command started with [`Sandbox::command`] keeps although
    /// the server's others are dropped ([`crate::secrets::is_secret_env`]): the key of an
    /// agent CLI run whole in the sandbox (Codex's), which its commands can then read too
    /// (through `/proc`; docs/sandbox.md, "Secrets").
    pub keep_env: Vec<String>,
}

/// The usage directory, relative to the worktree: writable inside the sandbox, so an agent
/// whose shell is sandboxed can still append to `FORGE_USAGE_FILE` (the host moves the
/// lines to the data directory after each turn, `host::absorb_usage`).
pub const USAGE_DIR: &str = ".forge/usage";

/// A temporary directory for the agent, relative to the worktree, writable inside the
/// sandbox: agent CLIs that run on the host but hand their shell commands to the sandbox
/// have those commands write into their `TMPDIR` (Claude Code's cwd file, Gemini CLI's
/// background pid file), which the private `/tmp` of the sandbox would hide.
pub const TMP_DIR: &str = ".forge/tmp";

/// The shims of the loop whose worktree is `worktree`: `<dataDir>/shims/<hash>`, in the
/// server's data directory and never in the worktree. The agent's `PATH` starts with it,
/// and the agent runs on the host: a directory of the worktree there would run whatever the
/// repository commits under that name (a `node`, a `git`, a `forge-lsp`) on the host,
/// outside the sandbox.
pub fn shim_dir(data_dir: &Path, worktree: &Path) -> PathBuf {
    use sha2::{Digest, Sha256};
    let digest = Sha256::digest(worktree.as_os_str().as_bytes());
    let hex: String = digest.iter().take(12).map(|b| format!("{b:02x}")).collect();
    data_dir.join("shims").join(hex)
}

/// The private home directory `cli` gets in the loop whose worktree is `worktree` (the
/// Codex preset's `CODEX_HOME`): `<dataDir>/agent-homes/<hash of the worktree path>/<cli>`,
/// removed with the shims.
pub fn agent_home(data_dir: &Path, worktree: &Path, cli: &str) -> PathBuf {
    let shims = shim_dir(data_dir, worktree);
    let hex = shims.file_name().map(|n| n.to_os_string()).unwrap_or_default();
    data_dir.join("agent-homes").join(hex).join(cli)
}

/// Removes the shims of the loop whose worktree is `worktree`, and its agents' homes (with
/// the worktree: at its removal and at a failed start). A directory already gone is not an
/// error.
pub fn remove_shims(data_dir: &Path, worktree: &Path) -> io::Result<()> {
    let homes = agent_home(data_dir, worktree, "x").parent().map(Path::to_path_buf);
    let mut first_error = None;
    // Each is removed even when the other cannot be (the homes hold copies of credentials).
    for dir in [Some(shim_dir(data_dir, worktree)), homes].into_iter().flatten() {
        match std::fs::remove_dir_all(&dir) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => {
                tracing::warn!("cannot remove {}: {e}", dir.display());
                first_error.get_or_insert(e);
            }
            _ => {}
        }
    }
    first_error.map_or(Ok(()), Err)
}

/// The `bwrap` to use: `$FORGE_BWRAP` when set, else the first `bwrap` on `PATH`.
pub fn find_bwrap() -> Result<PathBuf, String> {
    locate(std::env::var_os(BWRAP_ENV).as_deref(), std::env::var_os("PATH").as_deref())
}

fn locate(over: Option<&OsStr>, path: Option<&OsStr>) -> Result<PathBuf, String> {
    if let Some(p) = over.filter(|p| !p.is_empty()) {
        let p = PathBuf::from(p);
        return if is_executable(&p) {
            Ok(p)
        } else {
            Err(format!(
                "bubblewrap is not available: {BWRAP_ENV}={} is not an executable file. {HOW_TO_FIX}",
                p.display()
            ))
        };
    }
    path.and_then(|path| std::env::split_paths(path).map(|d| d.join("bwrap")).find(|p| is_executable(p)))
        .ok_or_else(|| format!("bubblewrap (bwrap) was not found on PATH. {HOW_TO_FIX}"))
}

/// Whether `p` is a regular file with an execute bit (what `execvp` may run).
pub(crate) fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// Finds `bwrap` and proves it can start a sandbox by running `true` in one.
pub fn probe() -> Result<PathBuf, String> {
    let bwrap = find_bwrap()?;
    let args = ["--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp", "--unshare-all"];
    // By its path: bubblewrap's own `PATH` search stops at a folder it cannot search (a
    // link loop on `PATH` failed the probe, said as missing user namespaces: review XA);
    // not one under `/tmp`, which the probe hides (review XB).
    let path = std::env::var_os("PATH").unwrap_or_default();
    // In the folder where it resolves: a `PATH` folder that is a link in `/tmp` is missing
    // there too (review XC). By its own name in it: a `true` that links to a multi-call
    // binary (coreutils built as one, NixOS) goes by the name it is started with, and
    // failed started as `coreutils` (review XD).
    // No step of its links under `/tmp` or `/dev` either, which the check's sandbox has
    // fresh (review XE: a link through `/tmp` was missing inside; review XF: a link's target
    // passing through a folder there, `/tmp/d/../../usr/bin/true`).
    let hidden = |p: &Path| p.starts_with("/tmp") || p.starts_with("/dev");
    let outside_tmp = |p: &Path| {
        let mut through_hidden = false;
        let (_, real) = walk_visiting(p, &mut |step| through_hidden |= hidden(step));
        real.is_some() && !through_hidden
    };
    let truth = std::env::split_paths(&path)
        .filter(|d| d.is_absolute())
        .filter_map(|d| d.canonicalize().ok())
        .map(|d| d.join("true"))
        .find(|p| is_executable(p) && outside_tmp(p))
        .unwrap_or_else(|| PathBuf::from("true"));
    let out = std::process::Command::new(&bwrap)
        .args(args)
        .args(["--die-with-parent".as_ref(), "--".as_ref(), truth.as_os_str()])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output()
        .map_err(|e| format!("bubblewrap ({}) could not be started: {e}. {HOW_TO_FIX}", bwrap.display()))?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr).trim().to_string();
        return Err(format!(
            "bubblewrap ({}) could not start a sandbox ({}){}. The host must allow unprivileged user namespaces (or run bwrap setuid). {HOW_TO_FIX}",
            bwrap.display(),
            out.status,
            if err.is_empty() { String::new() } else { format!(": {err}") }
        ));
    }
    Ok(bwrap)
}

/// The loop-start check: `Ok(None)` when the sandbox is disabled, the probed `bwrap` when
/// enabled, error 1004 saying how to install bubblewrap or disable the sandbox otherwise.
pub async fn require(enabled: bool, mode: &str, what: &str) -> Result<Option<PathBuf>, ToolError> {
    if !enabled {
        return Ok(None);
    }
    if mode != "bwrap" {
        return Err(ToolError::precondition(format!(
            "{what}: sandbox.mode = {mode:?} is not supported; use \"bwrap\" (bubblewrap), or set sandbox.enabled = false."
        )));
    }
    match tokio::task::spawn_blocking(probe).await {
        Ok(Ok(b)) => Ok(Some(b)),
        Ok(Err(e)) => Err(ToolError::precondition(format!("{what}: the sandbox is unavailable: {e}"))),
        Err(e) => Err(ToolError::internal(format!("{what}: probing the sandbox failed: {e}"))),
    }
}

/// The directory of a loop's sandbox bound read-only for the server's private socket,
/// which holds nothing but that socket (`forge_core::paths::private_socket_path`).
pub fn socket_dir(socket: Option<&Path>) -> Option<PathBuf> {
    // Where it resolves: bound there, it is reached inside by its spelling too, and a
    // folder spelled through a link cannot be bound at that spelling (bubblewrap follows
    // the link out of the new root: "Can't mkdir parents for …", with `XDG_RUNTIME_DIR` a
    // link; a review).
    let d = socket?.parent()?;
    Some(d.canonicalize().unwrap_or_else(|_| d.to_path_buf()))
}

/// Directories a sandbox sees as empty tmpfs: `/run/user` and the server's own
/// `$XDG_RUNTIME_DIR` when it is a runtime directory (absolute, ours, mode 0700, not `/`)
/// outside `/tmp` (private already). Binds made after them (the home directory when it is
/// inside one of them, [`home_to_restore`]; the private socket's directory; the worktree)
/// reappear inside.
pub fn hidden_dirs() -> Vec<PathBuf> {
    use std::os::unix::fs::MetadataExt;
    let mut out = vec![];
    let run_user = Path::new("/run/user");
    if run_user.is_dir() {
        out.push(run_user.to_path_buf());
    }
    if let Some(rt) = std::env::var_os("XDG_RUNTIME_DIR").map(PathBuf::from) {
        // SAFETY: geteuid has no preconditions.
        let me = unsafe { libc::geteuid() };
        let private = std::fs::metadata(&rt).is_ok_and(|m| m.is_dir() && m.uid() == me && m.mode() & 0o077 == 0);
        if rt.is_absolute() && private {
            // Where it really is: a runtime folder reached through a link (`/run/user/0` a
            // link elsewhere) was readable, its session bus too, at its own path (a review).
            // Only there: the link itself stays a link inside, to the hidden folder, and
            // bubblewrap cannot mount on a link (`XDG_RUNTIME_DIR=/srv/rtlink`, a link to
            // `/srv/rt`, failed every sandbox with "Can't mount tmpfs on /newroot/srv/rtlink":
            // a review).
            let p = rt.canonicalize().unwrap_or(rt);
            let covered = p.starts_with("/tmp") || p.starts_with(run_user);
            if p != Path::new("/") && !covered && !out.contains(&p) {
                out.push(p);
            }
        }
    }
    out
}

/// The home directory as a sandbox gives it back when a hidden folder holds it, as spelled
/// or where it resolves to (the agents' own configuration lives there).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RestoredHome {
    /// The folder it resolves to.
    pub real: PathBuf,
    /// Whether `real` is hidden, and so bound back read-only right after the tmpfs.
    pub bind: bool,
    /// The links in hidden folders on the way to it, made again (where, target as
    /// written): so the home is reached under its own spelling, while the secrets, which
    /// are hidden at their resolved paths, cover it there too (a home bound at a spelling
    /// through a link showed its `.ssh`: a review).
    pub links: Vec<(PathBuf, PathBuf)>,
}

/// [`RestoredHome`] for the hidden folders `hidden`; `None` when none holds the home (or
/// it does not resolve).
pub fn home_to_restore(hidden: &[PathBuf]) -> Option<RestoredHome> {
    restore(&home()?, hidden)
}

/// [`home_to_restore`] of the home directory `home`.
fn restore(home: &Path, hidden: &[PathBuf]) -> Option<RestoredHome> {
    let under = |p: &Path| hidden.iter().any(|d| p.starts_with(d));
    let (met, real) = walk(home);
    let real = real?;
    let links: Vec<(PathBuf, PathBuf)> = met.into_iter().filter(|(l, _)| under(l)).collect();
    if !under(home) && !under(&real) && links.is_empty() {
        return None;
    }
    Some(RestoredHome { bind: under(&real), links, real })
}

/// Where no link is made again in a sandbox ([`install_binds`], [`home_to_restore`]): the
/// hidden folders themselves, each user's runtime folder, `$XDG_RUNTIME_DIR`.
fn never_linked(hidden: &[PathBuf]) -> Vec<PathBuf> {
    let mut never: Vec<PathBuf> = hidden.to_vec();
    if let Some(rt) = std::env::var_os("XDG_RUNTIME_DIR").map(PathBuf::from).filter(|p| p.is_absolute()) {
        never.push(rt);
    }
    if let Ok(users) = std::fs::read_dir("/run/user") {
        never.extend(users.flatten().map(|e| e.path()));
    }
    never
}

/// System sockets whose daemons act as root for the members of their groups (Docker,
/// Podman, containerd, LXD, Incus, libvirt), bound over with `/dev/null` in a sandbox: each
/// one present, once.
pub fn hidden_sockets() -> Vec<PathBuf> {
    use std::os::unix::fs::FileTypeExt;
    let mut out: Vec<PathBuf> = vec![];
    for p in [
        "/run/docker.sock",
        "/var/run/docker.sock",
        "/run/podman/podman.sock",
        "/run/containerd/containerd.sock",
        "/var/snap/lxd/common/lxd/unix.socket",
        "/var/lib/lxd/unix.socket",
        "/var/lib/incus/unix.socket",
        "/run/libvirt/libvirt-sock",
    ] {
        let Ok(real) = Path::new(p).canonicalize() else { continue };
        let socket = std::fs::metadata(&real).is_ok_and(|m| m.file_type().is_socket());
        if socket && !out.contains(&real) {
            out.push(real);
        }
    }
    out
}

/// The read-only binds a loop's sandbox needs for its agent program: the program file when
/// `argv[0]` names one by path outside the worktree (a script run through the shims, whose
/// `#!/usr/bin/env bash` finds the sandboxed shell, must be visible inside).
///
/// Also the running `forge-lsp` binary itself (`FORGE_LSP_BIN`, first on the agent's `PATH`):
/// sandboxed shells run `forge-lsp call`, and a binary under `/tmp` (a build or an install
/// there) would be hidden by the sandbox's private `/tmp`.
pub fn program_binds(argv: Option<&[String]>, worktree: &Path) -> Vec<PathBuf> {
    let mut out = vec![];
    if let Some(prog) = argv.and_then(|a| a.first()).filter(|p| p.contains('/')) {
        let p = Path::new(prog);
        let p = if p.is_absolute() { p.to_path_buf() } else { worktree.join(p) };
        if let Ok(c) = p.canonicalize() {
            if c.is_file() && !c.starts_with(worktree) {
                out.push(c);
            }
        }
    }
    if let Some(bin) = crate::turn::self_bin().and_then(|b| b.canonicalize().ok()) {
        if bin.is_file() && !bin.starts_with(worktree) && !out.contains(&bin) {
            out.push(bin);
        }
    }
    out
}

/// What an agent CLI run whole in a sandbox (Codex) needs when the sandbox would hide its
/// program ([`install_binds`]).
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Install {
    /// Read-only binds, before the secrets are hidden ([`Sandbox::install_dirs`]).
    pub dirs: Vec<PathBuf>,
    /// Links in hidden folders on the way to the program, its interpreter and the `PATH`
    /// folders, made again inside as they are: (where, what they point to as written)
    /// ([`Sandbox::install_links`]). A link shows nothing its target does not.
    pub links: Vec<(PathBuf, PathBuf)>,
}

/// Where an agent CLI run whole in a sandbox (Codex) is, when the sandbox hides it:
/// `argv[0]` as `path` (the agent's `PATH`) finds it, under `/tmp` or a [`hidden_dirs`]
/// folder (an `npm install` in `/tmp`, a version manager's `PATH` entry in the runtime
/// folder), else nothing (everywhere else it is visible already).
///
/// Each link met on the way to it (as `realpath` walks it) that lies in a hidden folder is
/// made again inside (npm's `bin/codex`, fnm's linked `PATH` folder), so the program is
/// started by the name it has, and the file it resolves to, when hidden, has its package
/// bound: its outermost `node_modules` folder (so that Codex's platform package, a sibling,
/// comes along; pnpm's `.bin` scripts too), else the file alone; never a hidden folder
/// itself nor a user's runtime folder (`/run/user/<uid>`, `$XDG_RUNTIME_DIR`, whose
/// sockets reach daemons outside: a review). The interpreter of its `#!` line, found on
/// `PATH`, gets the same, and so do the links on the way to each `PATH` folder (fnm's
/// `npm` beside its `node`). The binds come before the secrets are hidden.
pub fn install_binds(argv: &[String], path: &OsStr, cwd: &Path) -> Install {
    let mut hidden = hidden_dirs();
    // The home directory given back inside a hidden folder is visible: what is in it stays
    // as it is (a link made again there would find itself in place, which bubblewrap before
    // 0.9 refuses: a review).
    let visible: Vec<PathBuf> = home_to_restore(&hidden)
        .filter(|h| h.bind || !h.real.starts_with("/tmp"))
        .map(|h| h.real)
        .into_iter()
        .collect();
    hidden.push(PathBuf::from("/tmp"));
    let never = never_linked(&hidden);
    install_binds_in(argv, path, cwd, &Folders { hidden, never, visible })
}

/// The folders [`install_binds`] goes by.
struct Folders {
    /// Hidden inside (tmpfs).
    hidden: Vec<PathBuf>,
    /// Never bound, and no link made at them.
    never: Vec<PathBuf>,
    /// Bound back inside a hidden one (the home directory).
    visible: Vec<PathBuf>,
}

/// [`install_binds`] with the folders given.
fn install_binds_in(argv: &[String], path: &OsStr, cwd: &Path, folders: &Folders) -> Install {
    let Folders { hidden, never, visible } = folders;
    let hides = |p: &Path| hidden.iter().any(|h| p.starts_with(h)) && !visible.iter().any(|v| p.starts_with(v));
    let bindable = |d: &Path| hides(d) && !never.iter().any(|n| n.starts_with(d));
    // The file's package: its outermost bindable `node_modules`, else the file alone.
    let package = |real: &Path| -> PathBuf {
        let modules =
            real.ancestors().filter(|a| a.file_name() == Some(OsStr::new("node_modules")) && bindable(a)).last();
        modules.map_or_else(|| real.to_path_buf(), Path::to_path_buf)
    };
    let mut binds: Vec<PathBuf> = vec![];
    let mut links: Vec<(PathBuf, PathBuf)> = vec![];
    let mut follow = |p: &Path, bind: bool, binds: &mut Vec<PathBuf>| -> Option<PathBuf> {
        let (met, real) = walk(p);
        links.extend(met.into_iter().filter(|(l, _)| hides(l) && !never.contains(l)));
        let real = real?;
        if bind && hides(&real) {
            binds.push(package(&real));
        }
        Some(real)
    };
    let found = argv.first().and_then(|p| find_program(p, path, cwd));
    if let Some(real) = found.as_deref().and_then(|f| follow(f, true, &mut binds)) {
        if let Some(i) = interpreter(&real).and_then(|i| find_program(&i, path, cwd)) {
            follow(&i, true, &mut binds);
        }
    }
    // Every folder: one spelled outside may lead through a hidden link too.
    for d in std::env::split_paths(path).filter(|d| d.is_absolute()) {
        follow(&d, false, &mut binds);
    }
    let mut out = Install::default();
    for d in binds {
        if !out.dirs.iter().any(|o| d.starts_with(o)) {
            out.dirs.retain(|o| !o.starts_with(&d));
            out.dirs.push(d);
        }
    }
    // A link inside a bound folder is there already (and could not be made on it).
    for l in links {
        if !out.dirs.iter().any(|d| l.0.starts_with(d)) && !out.links.iter().any(|o| o.0 == l.0) {
            out.links.push(l);
        }
    }
    out
}

/// The links met resolving `p` as `realpath` does, each (where, its target as written), and
/// the path it resolves to (`None`: it does not resolve, or 40 links were met).
fn walk(p: &Path) -> (Vec<(PathBuf, PathBuf)>, Option<PathBuf>) {
    walk_visiting(p, &mut |_| {})
}

/// [`walk`], telling `visit` each path it passes on the way, in order: each name looked
/// up (links included) and where each `..` leads back to (so a target's `..` through a
/// plain folder is seen too).
fn walk_visiting(p: &Path, visit: &mut dyn FnMut(&Path)) -> (Vec<(PathBuf, PathBuf)>, Option<PathBuf>) {
    let mut met = vec![];
    let mut done = PathBuf::from("/");
    let mut rest: std::collections::VecDeque<OsString> = p
        .components()
        .filter_map(|c| match c {
            Component::Normal(n) => Some(n.to_os_string()),
            Component::ParentDir => Some("..".into()),
            _ => None,
        })
        .collect();
    if !p.is_absolute() {
        return (met, None);
    }
    while let Some(c) = rest.pop_front() {
        if c == ".." {
            done.pop();
            visit(&done);
            continue;
        }
        let here = done.join(&c);
        visit(&here);
        let Ok(m) = std::fs::symlink_metadata(&here) else { return (met, None) };
        if !m.file_type().is_symlink() {
            done = here;
            continue;
        }
        if met.len() >= 40 {
            return (met, None);
        }
        let Ok(target) = std::fs::read_link(&here) else { return (met, None) };
        if target.is_absolute() {
            done = PathBuf::from("/");
        }
        for part in target.components().rev() {
            match part {
                Component::Normal(n) => rest.push_front(n.to_os_string()),
                Component::ParentDir => rest.push_front("..".into()),
                _ => {}
            }
        }
        met.push((here, target));
    }
    (met, Some(done))
}

/// The file `prog` names: a path (relative to `cwd`), else the first executable file of
/// that name in `path`'s absolute folders, as `execvp` finds it.
fn find_program(prog: &str, path: &OsStr, cwd: &Path) -> Option<PathBuf> {
    if prog.contains('/') {
        let p = Path::new(prog);
        let p = if p.is_absolute() { p.to_path_buf() } else { cwd.join(p) };
        return p.is_file().then_some(p);
    }
    if prog.is_empty() {
        return None;
    }
    std::env::split_paths(path).filter(|d| d.is_absolute()).map(|d| d.join(prog)).find(|p| is_executable(p))
}

/// The interpreter a `#!` line names: its program, or the one `/usr/bin/env` is given
/// (past its options and their arguments, and variable settings; `-S` splits its string
/// into more of them).
fn interpreter(script: &Path) -> Option<String> {
    use std::io::Read;
    let mut head = [0u8; 256];
    let n = std::fs::File::open(script).and_then(|mut f| f.read(&mut head)).ok()?;
    let line = head[..n].strip_prefix(b"#!")?;
    let line = &line[..line.iter().position(|&b| b == b'\n').unwrap_or(line.len())];
    let line = std::str::from_utf8(line).ok()?;
    let mut words = line.split_ascii_whitespace();
    let first = words.next()?;
    if Path::new(first).file_name() != Some(OsStr::new("env")) {
        return Some(first.to_string());
    }
    env_program(words)
}

/// The program of an `env` command line's words (GNU and BSD `env`).
fn env_program<'a>(words: impl Iterator<Item = &'a str>) -> Option<String> {
    let mut words: std::collections::VecDeque<&str> = words.collect();
    while let Some(w) = words.pop_front() {
        match w {
            "-u" | "-C" | "-a" | "-P" | "--unset" | "--chdir" | "--argv0" => {
                words.pop_front();
            }
            "--" => return words.pop_front().map(str::to_string),
            _ if w.starts_with("--split-string=") || (w.starts_with("-S") && w.len() > 2) => {
                let rest = w.strip_prefix("--split-string=").unwrap_or_else(|| &w[2..]);
                words.push_front(rest);
            }
            _ if w.starts_with('-') || w.contains('=') => {}
            _ => return Some(w.to_string()),
        }
    }
    None
}

/// A shell to exec from a shim: `/bin/<name>` or `/usr/bin/<name>` (absolute: the shim
/// directory is on `PATH`, so a bare name would find the shim again).
fn real_shell(name: &str) -> Option<PathBuf> {
    ["/bin", "/usr/bin"].iter().map(|d| Path::new(d).join(name)).find(|p| is_executable(p))
}

/// Single-quotes a word for `/bin/sh`.
fn sh_quote(s: &OsStr) -> Vec<u8> {
    let mut out = vec![b'\''];
    for &b in s.as_bytes() {
        if b == b'\'' {
            out.extend_from_slice(b"'\\''");
        } else {
            out.push(b);
        }
    }
    out.push(b'\'');
    out
}

/// The start of a shim's test of whether it already runs inside a sandbox (then it runs the
/// real shell directly): `FORGE_SANDBOX` is set **and** the shell's pid namespace is not
/// the server's. The variable alone is not enough: the agent process runs on the host, and
/// an agent CLI that takes environment variables from the repository's settings could set
/// it for its shells and so run them unsandboxed. `readlink` is named by its absolute path:
/// found through `PATH` (or as a function bash imports from the environment) it could be
/// the agent's own and answer with another namespace. Where the namespace cannot be read
/// (or there is no `readlink` at a fixed path), a shell counts as outside (it is sandboxed,
/// perhaps once more), never the other way.
fn inside_test() -> String {
    let test = format!("if [ -n \"${{{INSIDE_ENV}:-}}\" ]");
    let host = std::fs::read_link("/proc/self/ns/pid").ok().and_then(|l| l.to_str().map(str::to_string));
    let readlink = ["/usr/bin/readlink", "/bin/readlink"].into_iter().map(Path::new).find(|p| is_executable(p));
    match (host, readlink) {
        (Some(host), Some(readlink)) if !host.contains('\'') => format!(
            "{test} && ns=$({} /proc/self/ns/pid 2>/dev/null) && [ -n \"$ns\" ] && [ \"$ns\" != '{host}' ]; then exec ",
            String::from_utf8_lossy(&sh_quote(readlink.as_os_str()))
        ),
        _ => {
            tracing::warn!(
                "cannot read this process's pid namespace or find readlink; a sandbox shim always starts a sandbox"
            );
            "if false; then exec ".to_string()
        }
    }
}

/// Single-quoted words, each followed by a space.
fn quoted(words: &[OsString]) -> Vec<u8> {
    let mut out = Vec::new();
    for w in words {
        out.extend(sh_quote(w));
        out.push(b' ');
    }
    out
}

/// The end of a shim: it hides the secrets there are as the shell starts, then runs
/// bubblewrap. For each candidate path (`forge_p<i>`), present then and with no link on
/// its way, a mount is added to `forge_m` (a folder: a tmpfs; anything else: `/dev/null`
/// bound over it). One missing or reached through a link is left out: bubblewrap fails on a
/// mount point it would have to create in the read-only tree, and follows links (a link
/// made in the worktree could send the mount onto `/usr`). So a credential file removed
/// during a loop does not break its shells, and one that appears is hidden. `forge_m` holds
/// only the shim's own text (`"$forge_p<i>"` references), so the `eval` that runs
/// `<bwrap> <head> <mounts> <tail> -- <real shell> "$@"` passes the shim's arguments on
/// exactly as they came, in time linear in their number.
fn launch_sh(candidates: &[PathBuf], bwrap: &Path, head: &[u8], tail: &[u8], real_q: &[u8]) -> Vec<u8> {
    // The shim's own names, unset first: one the agent exported would stay exported.
    let mut s: Vec<u8> = b"unset forge_m forge_head forge_tail forge_a ns".to_vec();
    for i in 0..candidates.len() {
        s.extend_from_slice(format!(" forge_p{i}").as_bytes());
    }
    s.extend_from_slice(b"\nunset -f forge_ok 2>/dev/null\nforge_m=\n");
    if !candidates.is_empty() {
        s.extend_from_slice(b"forge_ok() { for forge_a; do [ -L \"$forge_a\" ] && return 1; done; return 0; }\n");
    }
    for (i, c) in candidates.iter().enumerate() {
        let var = format!("forge_p{i}");
        s.extend_from_slice(format!("{var}=").as_bytes());
        s.extend(sh_quote(c.as_os_str()));
        s.extend_from_slice(b"\nif forge_ok");
        // Every folder on the way (not `/`), then the path itself.
        let mut ancestors: Vec<&Path> = c.ancestors().filter(|a| a.parent().is_some()).collect();
        ancestors.reverse();
        for a in ancestors {
            s.push(b' ');
            s.extend(sh_quote(a.as_os_str()));
        }
        s.extend_from_slice(
            format!(
                "; then\n  if [ -d \"${var}\" ]; then forge_m=\"$forge_m --tmpfs \\\"\\${var}\\\"\"\n  elif [ -e \"${var}\" ]; then forge_m=\"$forge_m --ro-bind /dev/null \\\"\\${var}\\\"\"\n  fi\nfi\n"
            )
            .as_bytes(),
        );
    }
    let mut head_text = b"exec ".to_vec();
    head_text.extend(sh_quote(bwrap.as_os_str()));
    head_text.push(b' ');
    head_text.extend_from_slice(head);
    let mut tail_text = b" ".to_vec();
    tail_text.extend_from_slice(tail);
    tail_text.extend_from_slice(b"-- ");
    tail_text.extend_from_slice(real_q);
    tail_text.extend_from_slice(b" \"$@\"");
    s.extend_from_slice(b"forge_head=");
    s.extend(sh_quote(std::ffi::OsStr::from_bytes(&head_text)));
    s.extend_from_slice(b"\nforge_tail=");
    s.extend(sh_quote(std::ffi::OsStr::from_bytes(&tail_text)));
    s.extend_from_slice(b"\neval \"$forge_head$forge_m$forge_tail\"\n");
    s
}

/// The repository's git directory (the one the worktree's `.git` file leads into), when it
/// lies under `/tmp` or a runtime folder ([`hidden_dirs`]): the sandbox's are empty ones
/// of its own, so without binding it back (read-only, as the rest of the file system) git
/// could not read the repository inside (`fatal: not a git repository`; a review found it
/// under a runtime folder). Elsewhere it is visible read-only already.
fn hidden_git_dir(worktree: &Path) -> Option<PathBuf> {
    let text = std::fs::read_to_string(worktree.join(".git")).ok()?;
    let linked = PathBuf::from(text.strip_prefix("gitdir:")?.trim());
    let linked = if linked.is_absolute() { linked } else { worktree.join(linked) };
    // `<git dir>/worktrees/<name>`: the git directory holds it.
    let common = linked.parent().filter(|p| p.file_name().is_some_and(|n| n == "worktrees"))?.parent()?;
    let common = common.canonicalize().ok()?;
    let hidden = common.starts_with("/tmp") || hidden_dirs().iter().any(|h| common.starts_with(h));
    hidden.then_some(common)
}

impl Sandbox {
    /// The sandbox of a loop worktree, with the server's socket directory bound.
    pub fn for_loop(worktree: &Path, network: bool, socket: Option<&Path>) -> Sandbox {
        Sandbox {
            worktree: worktree.to_path_buf(),
            network,
            socket_dir: socket_dir(socket),
            binds: vec![],
            ro_binds: hidden_git_dir(worktree).into_iter().collect(),
            install_dirs: vec![],
            install_links: vec![],
            secrets: Secrets::default(),
            data_dir: None,
            keep_env: vec![],
        }
    }

    /// With the configuration's secret rules ([`Secrets::from_config`]).
    pub fn with_secrets(mut self, secrets: Secrets) -> Sandbox {
        self.secrets = secrets;
        self
    }

    /// With the links on the way to each folder of `path` (the `PATH` its commands get)
    /// made again inside where they lie in a folder the sandbox hides ([`install_binds`]
    /// for no program): fnm's `PATH` folder is a link in the runtime folder to the Node.js
    /// install in the home directory, and without it `node` and `npm` were not found in a
    /// shell of the loop. Nothing is bound for it: a link shows nothing its target does not.
    pub fn with_path_links(mut self, path: &OsStr) -> Sandbox {
        self.install_links = install_binds(&[], path, &self.worktree).links;
        self
    }

    /// With the loop's shims ([`shim_dir`]) visible, read-only, inside: a shell started
    /// inside through `$SHELL` finds them (they run the real shell there) even when the
    /// data directory is under a directory the sandbox hides (`/tmp`, the runtime
    /// directory).
    pub fn with_shims(mut self, data_dir: &Path) -> Sandbox {
        self.ro_binds.push(shim_dir(data_dir, &self.worktree));
        self.data_dir = Some(data_dir.to_path_buf());
        self
    }

    /// The `bwrap` options (without the command).
    fn args(&self, cwd: Option<&Path>) -> Vec<OsString> {
        let mut a = self.head_args();
        // The user's secrets, before the binds below (which reappear even inside one).
        let (homes, data) = (crate::secrets::homes(), self.data_dir.as_deref());
        let homes: Vec<&Path> = homes.iter().map(PathBuf::as_path).collect();
        for (p, dir) in crate::secrets::secret_mounts(&homes, &self.secrets, data, &self.install_dirs) {
            if dir {
                a.extend(["--tmpfs".into(), p.into_os_string()]);
            } else {
                a.extend(["--ro-bind".into(), "/dev/null".into(), p.into_os_string()]);
            }
        }
        a.extend(self.tail_args(cwd));
        a
    }

    /// The options before the secrets' mounts: the file system, `/tmp`, the hidden runtime
    /// folders, an agent CLI's install folders there, the hidden sockets.
    fn head_args(&self) -> Vec<OsString> {
        let mut a: Vec<OsString> = Vec::new();
        let mut push = |xs: &[&OsStr]| a.extend(xs.iter().map(|x| x.to_os_string()));
        push(&["--ro-bind".as_ref(), "/".as_ref(), "/".as_ref()]);
        push(&["--dev".as_ref(), "/dev".as_ref(), "--proc".as_ref(), "/proc".as_ref()]);
        push(&["--tmpfs".as_ref(), "/tmp".as_ref()]);
        let hidden = hidden_dirs();
        for d in &hidden {
            push(&["--tmpfs".as_ref(), d.as_os_str()]);
        }
        let home = home_to_restore(&hidden);
        let never = never_linked(&hidden);
        // Never a runtime folder itself given back as the home: its sockets would come with
        // it (a home that is the runtime folder is missing inside instead).
        let home_bind = home.as_ref().filter(|h| h.bind && !never.contains(&h.real)).map(|h| h.real.clone());
        if let Some(real) = &home_bind {
            push(&["--ro-bind-try".as_ref(), real.as_os_str(), real.as_os_str()]);
        }
        for d in &self.install_dirs {
            push(&["--ro-bind-try".as_ref(), d.as_os_str(), d.as_os_str()]);
        }
        // Links made again, once each: not at a runtime folder, nor where a mount goes
        // through (bubblewrap would follow the link out of the sandbox's own folders, or
        // find a folder it made where the link goes): the worktree, the socket's folder,
        // the other binds, the home's.
        let later: Vec<&Path> = [Some(self.worktree.as_path()), self.socket_dir.as_deref(), home_bind.as_deref()]
            .into_iter()
            .flatten()
            .chain(self.binds.iter().map(PathBuf::as_path))
            .chain(self.ro_binds.iter().map(PathBuf::as_path))
            .chain(self.install_dirs.iter().map(PathBuf::as_path))
            .collect();
        // Nor inside a folder bound already (it is there, on a read-only mount).
        let bound: Vec<&Path> =
            home_bind.iter().map(PathBuf::as_path).chain(self.install_dirs.iter().map(PathBuf::as_path)).collect();
        let mut made: Vec<&Path> = vec![];
        let home_links = home.as_ref().map(|h| h.links.as_slice()).unwrap_or_default();
        for (link, target) in home_links.iter().chain(&self.install_links) {
            let inside_bound = bound.iter().any(|b| link.starts_with(b));
            if !never.contains(link)
                && !inside_bound
                && !later.iter().any(|l| l.starts_with(link))
                && !made.contains(&link.as_path())
            {
                push(&["--symlink".as_ref(), target.as_os_str(), link.as_os_str()]);
                made.push(link);
            }
        }
        for sock in hidden_sockets() {
            push(&["--ro-bind".as_ref(), "/dev/null".as_ref(), sock.as_os_str()]);
        }
        a
    }

    /// The options after the secrets' mounts: the binds, the namespaces, the variables.
    fn tail_args(&self, cwd: Option<&Path>) -> Vec<OsString> {
        let mut a: Vec<OsString> = Vec::new();
        let mut push = |xs: &[&OsStr]| a.extend(xs.iter().map(|x| x.to_os_string()));
        let (wt, forge) = (self.worktree.as_os_str(), self.worktree.join(".forge"));
        // After the tmpfs (so directories under /tmp reappear), before the worktree (so a
        // bind that contains the worktree does not hide its binds).
        if let Some(d) = &self.socket_dir {
            push(&["--ro-bind-try".as_ref(), d.as_os_str(), d.as_os_str()]);
        }
        for b in &self.binds {
            push(&["--bind-try".as_ref(), b.as_os_str(), b.as_os_str()]);
        }
        for b in &self.ro_binds {
            push(&["--ro-bind-try".as_ref(), b.as_os_str(), b.as_os_str()]);
        }
        push(&["--bind".as_ref(), wt, wt]);
        push(&["--ro-bind-try".as_ref(), forge.as_os_str(), forge.as_os_str()]);
        // The worktree's `.git` names the repository the server commits its checkpoints
        // to, on the host: a command must not point it elsewhere (`git::open_worktree`
        // checks it too).
        let git = self.worktree.join(".git");
        push(&["--ro-bind-try".as_ref(), git.as_os_str(), git.as_os_str()]);
        for d in [USAGE_DIR, TMP_DIR] {
            let d = self.worktree.join(d);
            push(&["--bind-try".as_ref(), d.as_os_str(), d.as_os_str()]);
        }
        push(&["--unshare-all".as_ref()]);
        if self.network {
            push(&["--share-net".as_ref()]);
        }
        push(&["--die-with-parent".as_ref()]);
        push(&["--setenv".as_ref(), INSIDE_ENV.as_ref(), "1".as_ref()]);
        push(&["--setenv".as_ref(), "TMPDIR".as_ref(), "/tmp".as_ref()]);
        if let Some(c) = cwd {
            push(&["--chdir".as_ref(), c.as_os_str()]);
        }
        a
    }

    /// `argv` inside the sandbox, in `cwd` (a path inside the worktree).
    /// The command does not inherit the server's secret-named variables
    /// ([`crate::secrets::is_secret_env`]) but those of [`Sandbox::keep_env`]; what the
    /// caller sets on it afterwards (a plugin's configured variables) it gets.
    pub fn command(&self, bwrap: &Path, argv: &[String], cwd: &Path) -> tokio::process::Command {
        let mut c = tokio::process::Command::new(bwrap);
        c.args(self.args(Some(cwd))).arg("--").args(argv);
        for name in self.scrubbed_env() {
            c.env_remove(name);
        }
        c
    }

    /// Like [`Sandbox::command`], as a blocking `std` command (plugin tools).
    pub fn std_command(&self, bwrap: &Path, argv: &[String], cwd: &Path) -> std::process::Command {
        let mut c = std::process::Command::new(bwrap);
        c.args(self.args(Some(cwd))).arg("--").args(argv);
        for name in self.scrubbed_env() {
            c.env_remove(name);
        }
        c
    }

    /// The variables of this process's environment a command in the sandbox does not get.
    fn scrubbed_env(&self) -> Vec<OsString> {
        let mut names = crate::secrets::secret_vars_here(&self.secrets.expose_env);
        names.retain(|k| !self.keep_env.iter().any(|e| *e == k.to_string_lossy()));
        names
    }

    /// Writes the executable shims `<shim_dir>/{sh,bash}`: each execs the real
    /// `/bin/sh` (`/bin/bash`) inside the sandbox with the same arguments, in the caller's
    /// working directory (bwrap keeps it when it exists inside, else uses `$HOME`). A shim
    /// started inside a sandbox (`FORGE_SANDBOX=1`) runs the real shell directly. Returns
    /// the directory. `bash` is skipped when the host has none.
    pub fn write_shim(&self, bwrap: &Path, data_dir: &Path) -> io::Result<PathBuf> {
        use std::io::Write;
        use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
        let dir = shim_dir(data_dir, &self.worktree);
        std::fs::DirBuilder::new().recursive(true).mode(0o700).create(&dir)?;
        // A committed `.forge` (or `.forge/usage`, `.forge/tmp`) symlink is refused, never
        // followed.
        drop(forge_core::beneath::open_dir(&self.worktree, Path::new(USAGE_DIR), true)?);
        drop(forge_core::beneath::open_dir(&self.worktree, Path::new(TMP_DIR), true)?);
        let head = quoted(&self.head_args());
        let tail = quoted(&self.tail_args(None));
        let (homes, data) = (crate::secrets::homes(), self.data_dir.as_deref());
        let homes: Vec<&Path> = homes.iter().map(PathBuf::as_path).collect();
        let candidates = crate::secrets::secret_candidates(&homes, &self.secrets, data, &self.install_dirs);
        let inside = inside_test();
        let scrub = crate::secrets::env_scrub_sh(&self.secrets.expose_env);
        // The end of every shim: the variables dropped, then bubblewrap with the secrets'
        // mounts there are as the shell starts (`launch_sh`).
        let start = |real_q: &[u8]| -> Vec<u8> {
            let mut s = scrub.as_bytes().to_vec();
            s.extend(launch_sh(&candidates, bwrap, &head, &tail, real_q));
            s
        };
        let write = |name: &str, s: &[u8]| -> io::Result<()> {
            // A fresh file renamed over the old one: never writes through a planted symlink.
            let tmp = dir.join(format!(".{name}.tmp"));
            let _ = std::fs::remove_file(&tmp);
            let mut f = std::fs::OpenOptions::new().write(true).create_new(true).mode(0o755).open(&tmp)?;
            f.write_all(s)?;
            f.sync_all()?;
            drop(f);
            std::fs::rename(&tmp, dir.join(name))
        };
        for name in ["sh", "bash"] {
            let Some(real) = real_shell(name) else {
                if name == "sh" {
                    return Err(io::Error::new(io::ErrorKind::NotFound, "neither /bin/sh nor /usr/bin/sh exists"));
                }
                continue;
            };
            let real_q = sh_quote(real.as_os_str());
            let mut s: Vec<u8> = Vec::new();
            s.extend_from_slice(b"#!/bin/sh\n");
            s.extend_from_slice(
                format!(
                    "# Generated by forge-lsp: runs {} inside this loop's sandbox (bubblewrap).\n# Rewritten at every loop start and restart; do not edit.\n",
                    real.display()
                )
                .as_bytes(),
            );
            s.extend_from_slice(inside.as_bytes());
            s.extend_from_slice(&real_q);
            s.extend_from_slice(b" \"$@\"; fi\n");
            s.extend(start(&real_q));
            write(name, &s)?;
        }
        // `prefix`: runs its one argument, a whole command line, with bash (else sh) in
        // the sandbox (Claude Code's `CLAUDE_CODE_SHELL_PREFIX` hands each command over so).
        if let Some(real) = real_shell("bash").or_else(|| real_shell("sh")) {
            let real_q = sh_quote(real.as_os_str());
            let mut s: Vec<u8> = Vec::new();
            s.extend_from_slice(b"#!/bin/sh\n# Generated by forge-lsp: runs its argument, a command line, inside this loop's sandbox.\n# Rewritten at every loop start and restart; do not edit.\n");
            s.extend_from_slice(inside.as_bytes());
            s.extend_from_slice(&real_q);
            s.extend_from_slice(b" -c \"$1\"; fi\nset -- -c \"$1\"\n");
            s.extend(start(&real_q));
            write("prefix", &s)?;
        }
        Ok(dir)
    }
}

/// A loop's saved settings `(sandbox, sandbox_network)` (restart uses these, not the
/// current configuration).
pub async fn saved(engine: &Arc<Engine>, project: &str, name: &str) -> Result<(bool, bool), ToolError> {
    let (p, n) = (project.to_string(), name.to_string());
    engine
        .store
        .call(move |c| {
            c.query_row(
                "SELECT sandbox, sandbox_network FROM loops WHERE project_id = ?1 AND loop_name = ?2",
                rusqlite::params![p, n],
                |r| Ok((r.get::<_, i64>(0)? != 0, r.get::<_, i64>(1)? != 0)),
            )
        })
        .await
        .map_err(|e| ToolError::internal(format!("reading the sandbox settings of loop \"{name}\" failed: {e}")))
}

// ---------------------------------------------------------------------------------------------
// forge.shell
// ---------------------------------------------------------------------------------------------

/// Normalizes `forge.shell`'s `cwd`: a relative path that stays inside the worktree
/// (`a/../b` is `b`); `""` is the worktree itself.
pub fn normalize_cwd(cwd: Option<&str>) -> Result<String, String> {
    let raw = cwd.unwrap_or("").trim();
    let p = Path::new(raw);
    if p.is_absolute() {
        return Err(format!("must be a path relative to the worktree, got the absolute path {raw:?}"));
    }
    let mut parts: Vec<&OsStr> = Vec::new();
    for c in p.components() {
        match c {
            Component::Normal(s) => parts.push(s),
            Component::CurDir => {}
            Component::ParentDir => {
                if parts.pop().is_none() {
                    return Err(format!("must stay inside the worktree, but {raw:?} leaves it"));
                }
            }
            Component::RootDir | Component::Prefix(_) => {
                return Err(format!("must be a path relative to the worktree, got {raw:?}"))
            }
        }
    }
    Ok(parts.iter().map(|s| s.to_string_lossy()).collect::<Vec<_>>().join("/"))
}

/// What a command printed, and how it ended.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Captured {
    /// `None` when killed by a signal (or on timeout).
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    pub stdout: String,
    pub stderr: String,
    /// Total bytes written to each stream (kept: at most [`OUTPUT_CAP`]).
    pub stdout_bytes: usize,
    pub stderr_bytes: usize,
    pub timed_out: bool,
    /// Killed because what it ran for ended ([`run_captured_while`]: a turn stopped).
    pub stopped: bool,
}

impl Captured {
    pub fn stdout_truncated(&self) -> bool {
        self.stdout_bytes > OUTPUT_CAP
    }
    pub fn stderr_truncated(&self) -> bool {
        self.stderr_bytes > OUTPUT_CAP
    }
}

/// Reads a stream, keeping the first [`OUTPUT_CAP`] bytes and counting the rest, until EOF
/// or `stop`.
async fn read_capped<R: tokio::io::AsyncRead + Unpin>(
    r: Option<R>,
    mut stop: tokio::sync::watch::Receiver<bool>,
) -> (Vec<u8>, usize) {
    let Some(mut r) = r else { return (Vec::new(), 0) };
    let mut buf = Vec::new();
    let mut total = 0usize;
    let mut chunk = vec![0u8; 64 * 1024];
    loop {
        tokio::select! {
            n = r.read(&mut chunk) => match n {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    total += n;
                    let room = OUTPUT_CAP.saturating_sub(buf.len());
                    buf.extend_from_slice(&chunk[..n.min(room)]);
                }
            },
            _ = stop.changed() => break,
        }
    }
    (buf, total)
}

/// UTF-8 text of captured bytes; a character cut by the cap is dropped.
fn text_of(mut b: Vec<u8>, cut: bool) -> String {
    if cut {
        if let Err(e) = std::str::from_utf8(&b) {
            if e.error_len().is_none() {
                b.truncate(e.valid_up_to());
            }
        }
    }
    String::from_utf8_lossy(&b).into_owned()
}

/// Kills a process group now (and, through the guard, when a run is abandoned).
struct GroupGuard(Option<u32>);

impl GroupGuard {
    fn kill(&self) {
        if let Some(pid) = self.0 {
            crate::process::kill_group(pid);
        }
    }
}

impl Drop for GroupGuard {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Runs `cmd` in its own process group with no input, capturing both streams (each capped
/// at [`OUTPUT_CAP`]); on `timeout` the whole group is killed and `timed_out` set. Processes
/// the command left running in its group are killed once it exited and they still hold its
/// output open.
pub async fn run_captured(cmd: tokio::process::Command, timeout: Duration) -> io::Result<Captured> {
    run_captured_while(cmd, timeout, None).await
}

/// How often [`run_captured_while`] asks whether its command is still wanted.
const STILL_WANTED_EVERY: Duration = Duration::from_millis(100);

/// [`run_captured`], and the command's group is killed as soon as `wanted` (asked every
/// [`STILL_WANTED_EVERY`]) says no: `forge.shell` runs for a turn, and a turn stopped
/// meanwhile (cancel, restart, the stall watchdog) takes its command along, whenever
/// either started.
pub async fn run_captured_while(
    mut cmd: tokio::process::Command,
    timeout: Duration,
    wanted: Option<Box<dyn Fn() -> bool + Send + Sync>>,
) -> io::Result<Captured> {
    use std::os::unix::process::ExitStatusExt;
    cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).process_group(0).kill_on_drop(true);
    // Nobody enforces the time limit once this server is gone.
    crate::process::die_with_server(&mut cmd);
    let mut child = cmd.spawn()?;
    let mut guard = GroupGuard(child.id());
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let mut out = tokio::spawn(read_capped(child.stdout.take(), stop_rx.clone()));
    let mut err = tokio::spawn(read_capped(child.stderr.take(), stop_rx));
    let unwanted = async {
        match &wanted {
            Some(w) => loop {
                if !w() {
                    break;
                }
                tokio::time::sleep(STILL_WANTED_EVERY).await;
            },
            None => std::future::pending::<()>().await,
        }
    };
    let (status, timed_out, stopped) = tokio::select! {
        s = tokio::time::timeout(timeout, child.wait()) => match s {
            // Killed as its turn ended (the turn's end kills what it marked, this command
            // with it): that, not a crash. Before, the kill won the race with the next
            // "still wanted" check, and the reply said "Killed by signal 9" (review YI).
            Ok(s) => {
                let s = s?;
                let turn_ended = !s.success() && wanted.as_ref().is_some_and(|w| !w());
                (s, false, turn_ended)
            }
            Err(_) => {
                guard.kill();
                (child.wait().await?, true, false)
            }
        },
        _ = unwanted => {
            guard.kill();
            (child.wait().await?, false, true)
        }
    };
    // The command exited; background processes of its group may still hold the pipes.
    let grace = Duration::from_millis(500);
    let mut o = tokio::time::timeout(grace, &mut out).await.ok();
    let mut e = tokio::time::timeout(grace, &mut err).await.ok();
    if o.is_none() || e.is_none() {
        guard.kill();
        // A process that left the group keeps the pipe: stop reading after a bound.
        let st = stop_tx.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_secs(2)).await;
            let _ = st.send(true);
        });
        if o.is_none() {
            o = Some(out.await);
        }
        if e.is_none() {
            e = Some(err.await);
        }
    }
    guard.0 = None;
    drop(stop_tx);
    let (o, ob) = o.and_then(Result::ok).unwrap_or_default();
    let (e, eb) = e.and_then(Result::ok).unwrap_or_default();
    Ok(Captured {
        // Killed: no exit code of its own (the sandbox's `bwrap` passes its command's
        // SIGKILL on as 137).
        exit_code: if timed_out || stopped { None } else { status.code() },
        signal: status.signal(),
        stdout: text_of(o, ob > OUTPUT_CAP),
        stderr: text_of(e, eb > OUTPUT_CAP),
        stdout_bytes: ob,
        stderr_bytes: eb,
        timed_out,
        stopped,
    })
}

/// The variable that marks the processes of one `forge.shell` call.
const SHELL_CALL_ENV: &str = "FORGE_SHELL_CALL";

/// Kills the processes that carry a `forge.shell` call's mark when dropped holding it (on a
/// thread of its own: a scan of every process's environment must not hold the runtime).
struct KillCallOnDrop(Option<String>);

impl Drop for KillCallOnDrop {
    fn drop(&mut self) {
        if let Some(call) = self.0.take() {
            std::thread::spawn(move || crate::process::kill_marked(SHELL_CALL_ENV, &call));
        }
    }
}

/// The `forge.shell` result of a run.
pub fn shell_result(c: &Captured, timeout_ms: u64, sandboxed: bool) -> CommandResult {
    let mut text = String::new();
    if c.timed_out {
        text.push_str(&format!("Timed out after {timeout_ms} ms: the command's process group was killed.\n"));
    } else if c.stopped {
        text.push_str("Stopped: the turn it ran for ended (it ended, or a cancel, a restart, the stall watchdog or the server's shutdown stopped it); the command's process group was killed.\n");
    } else if let Some(code) = c.exit_code {
        text.push_str(&format!("Exit code: {code}\n"));
    } else {
        text.push_str(&format!("Killed by signal {}\n", c.signal.unwrap_or(0)));
    }
    if !sandboxed {
        text.push_str("(ran in the worktree without a sandbox: this loop has sandbox off)\n");
    }
    for (name, s, bytes) in [("stdout", &c.stdout, c.stdout_bytes), ("stderr", &c.stderr, c.stderr_bytes)] {
        if bytes == 0 {
            continue;
        }
        text.push_str(&format!("\n--- {name} ---\n{s}"));
        if !s.ends_with('\n') {
            text.push('\n');
        }
        if bytes > OUTPUT_CAP {
            text.push_str(&format!("[{name} truncated: kept the first {OUTPUT_CAP} of {bytes} bytes]\n"));
        }
    }
    if c.stdout_bytes == 0 && c.stderr_bytes == 0 {
        text.push_str("(no output)\n");
    }
    CommandResult {
        text: text.trim_end().to_string(),
        data: json!({
            "exitCode": c.exit_code,
            "stdout": c.stdout,
            "stderr": c.stderr,
            "stdoutTruncated": c.stdout_truncated(),
            "stderrTruncated": c.stderr_truncated(),
            "timedOut": c.timed_out,
            "stopped": c.stopped,
        })
        .into(),
    }
}

/// The effect of `forge.shell`: `sh -c <command>` in `<worktree>/<cwd>`, inside the loop's
/// sandbox when the loop row has `sandbox = 1`, else directly in the worktree.
pub async fn shell(
    engine: &Arc<Engine>,
    env: &ToolEnv,
    loop_name: &str,
    command: &str,
    cwd: &str,
    timeout_ms: u64,
) -> Result<CommandResult, ToolError> {
    let (p, n) = (env.project.id.clone(), loop_name.to_string());
    let row = engine
        .store
        .call(move |c| {
            use rusqlite::OptionalExtension;
            c.query_row(
                "SELECT worktree_dir, sandbox, sandbox_network, owner_pid FROM loops WHERE project_id = ?1 AND loop_name = ?2",
                rusqlite::params![p, n],
                |r| {
                    Ok((
                        r.get::<_, String>(0)?,
                        r.get::<_, i64>(1)? != 0,
                        r.get::<_, i64>(2)? != 0,
                        r.get::<_, Option<i64>>(3)?,
                    ))
                },
            )
            .optional()
        })
        .await
        .map_err(|e| ToolError::internal(format!("shell failed: database error: {e}")))?;
    let Some((wt, sandboxed, network, owner)) = row else {
        return Err(ToolError::not_found(format!("No loop found for loop \"{loop_name}\".")));
    };
    // Commands run in the server that runs the loop's turns, which kills them with their
    // turn: another server on the same data directory would run them for no turn of its
    // own (a probe ran one there with an ended session's credentials).
    if let Some(pid) = owner.filter(|&pid| pid != i64::from(std::process::id())) {
        return Err(ToolError::precondition(format!(
            "shell failed: loop \"{loop_name}\" is run by another forge-lsp server (pid {pid}); forge.shell runs in the server that runs the loop (its agents' FORGE_LSP_SOCKET)"
        )));
    }
    let wt = PathBuf::from(wt);
    let dir = if cwd.is_empty() { wt.clone() } else { wt.join(cwd) };
    // Symlinks must not lead out of the worktree either.
    let (wt_c, dir_c) = (wt.canonicalize(), dir.canonicalize());
    match (&wt_c, &dir_c) {
        (Err(e), _) => {
            return Err(ToolError::precondition(format!(
                "shell failed: the worktree {} of loop \"{loop_name}\" is not accessible: {e}",
                wt.display()
            )))
        }
        (Ok(_), Err(_)) => {
            return Err(ToolError::invalid(format!("shell failed: cwd {cwd:?} is not a directory in the worktree")))
        }
        (Ok(w), Ok(d)) if !d.starts_with(w) => {
            return Err(ToolError::invalid(format!("shell failed: cwd {cwd:?} leads out of the worktree (symlink)")))
        }
        (Ok(_), Ok(d)) if !d.is_dir() => {
            return Err(ToolError::invalid(format!("shell failed: cwd {cwd:?} is not a directory in the worktree")))
        }
        _ => {}
    }
    let argv = ["/bin/sh".to_string(), "-c".to_string(), command.to_string()];
    let cmd = if sandboxed {
        let bwrap = find_bwrap().map_err(|e| ToolError::precondition(format!("shell failed: {e}")))?;
        Sandbox::for_loop(&wt, network, engine.private_socket().as_deref())
            .with_secrets(Secrets::from_config(&env.config))
            .with_shims(&engine.data_dir)
            // The command gets the server's `PATH`.
            .with_path_links(&std::env::var_os("PATH").unwrap_or_default())
            .command(&bwrap, &argv, &dir)
    } else {
        let mut c = tokio::process::Command::new(&argv[0]);
        c.args(&argv[1..]).current_dir(&dir);
        c
    };
    let mut cmd = cmd;
    // Run for a turn of the caller's session: the command carries that turn's mark, so
    // stopping the turn (cancel, restart, the stall watchdog) kills it too. It is a process
    // group of its own, no child of the agent: before, it outlived the cancel and wrote into
    // the restarted loop's worktree.
    // A call that arrives after the turn ended (or from a session whose turn runs in no
    // server's hands here) runs nothing; one whose turn ends while it runs is killed then,
    // even if it started after the stopped turn's last look for its processes.
    // A session this server never ran a turn of (a client connected as the loop session
    // itself) runs its command unmarked, as before.
    let session = env.caller.session_id.clone();
    // Found by the session's mark after a server killed outright (`process::kill_session_marked`).
    cmd.env(crate::process::SHELL_SESSION_ENV, &session);
    let wanted: Option<Box<dyn Fn() -> bool + Send + Sync>> = match crate::process::running_turn(&session) {
        Some(turn) => {
            cmd.env(crate::process::TURN_ENV, &turn);
            Some(Box::new(move || crate::process::running_turn(&session).as_deref() == Some(turn.as_str())))
        }
        None if crate::process::turn_ended_here(&session) => {
            return Err(ToolError::precondition(format!(
                "shell failed: no turn of session {session} is running in this server (it ended, or was cancelled or restarted); forge.shell runs commands for a running turn only"
            )));
        }
        None => None,
    };
    // The call's own mark: what its command started that left its process group (`setsid`)
    // is killed with it on a timeout or a stop, as a plugin tool call's is. Only without
    // the sandbox: with it, the sandbox's process namespace ends with the command.
    static CALLS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let call = format!("{}-{}", std::process::id(), CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed));
    cmd.env(SHELL_CALL_ENV, &call);
    // Dropped with the call (its caller gave up or went away) before the command ended:
    // its marked processes go too (review YJ: a `setsid` child outlived the call, the turn
    // and a loop-cancel).
    let mut on_drop = KillCallOnDrop((!sandboxed).then(|| call.clone()));
    let captured = run_captured_while(cmd, Duration::from_millis(timeout_ms), wanted).await;
    on_drop.0 = None;
    let captured = captured.map_err(|e| ToolError::internal(format!("shell failed: cannot run the command: {e}")))?;
    if !sandboxed && (captured.timed_out || captured.stopped) {
        // Review YI: a `setsid` child outlived the timeout.
        let _ = tokio::task::spawn_blocking(move || crate::process::kill_marked(SHELL_CALL_ENV, &call)).await;
    }
    Ok(shell_result(&captured, timeout_ms, sandboxed))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::secrets::outside_tmp;

    /// `script` run through the shim `name` of `dir` (`prefix` takes it as its one
    /// argument, the others after `-c`), in `cwd`, without `FORGE_SANDBOX`.
    fn through_shim(dir: &Path, name: &str, script: &str, cwd: &Path) -> tokio::process::Command {
        let mut b = tokio::process::Command::new(dir.join(name));
        if name != "prefix" {
            b.arg("-c");
        }
        b.arg(script).env_remove(INSIDE_ENV).current_dir(cwd);
        b
    }

    fn bwrap() -> PathBuf {
        probe().unwrap_or_else(|e| panic!("these tests need a working bubblewrap: {e}"))
    }

    fn sandbox(dir: &Path) -> Sandbox {
        Sandbox::for_loop(dir, false, None)
    }

    #[test]
    fn program_binds_include_the_running_binary_and_an_outside_program() {
        let wt = tempfile::tempdir().unwrap();
        let me = std::env::current_exe().unwrap().canonicalize().unwrap();
        // No program path: the running binary alone (it may be under /tmp, hidden inside).
        assert_eq!(program_binds(None, wt.path()), vec![me.clone()]);
        assert_eq!(program_binds(Some(&["opencode".to_string()]), wt.path()), vec![me.clone()]);
        // A program file outside the worktree comes first; one inside is not bound.
        let outside = tempfile::NamedTempFile::new().unwrap();
        let o = outside.path().canonicalize().unwrap();
        assert_eq!(program_binds(Some(&[o.display().to_string()]), wt.path()), vec![o, me.clone()]);
        std::fs::write(wt.path().join("agent.sh"), "#!/bin/sh\n").unwrap();
        assert_eq!(program_binds(Some(&["./agent.sh".to_string()]), wt.path()), vec![me]);
    }

    /// An npm-style install under `/tmp`: `<t>/inst/node_modules/.bin/fakecli` links to
    /// `@x/cli/bin/cli.sh`, which runs a file of its sibling package `@x/cli-linux`.
    fn npm_install_in_tmp() -> (tempfile::TempDir, PathBuf) {
        let t = tempfile::Builder::new().prefix("fl-inst").tempdir_in("/tmp").unwrap();
        let nm = t.path().canonicalize().unwrap().join("inst/node_modules");
        std::fs::create_dir_all(nm.join(".bin")).unwrap();
        std::fs::create_dir_all(nm.join("@x/cli/bin")).unwrap();
        std::fs::create_dir_all(nm.join("@x/cli-linux")).unwrap();
        let cli = nm.join("@x/cli/bin/cli.sh");
        std::fs::write(
            &cli,
            "#!/bin/sh\nd=$(dirname \"$(readlink -f \"$0\")\")\n. \"$d/../../cli-linux/payload.sh\"\n",
        )
        .unwrap();
        std::fs::write(nm.join("@x/cli-linux/payload.sh"), "echo payload-ran\n").unwrap();
        std::fs::set_permissions(&cli, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
        std::os::unix::fs::symlink("../@x/cli/bin/cli.sh", nm.join(".bin/fakecli")).unwrap();
        (t, nm)
    }

    #[test]
    fn install_binds_cover_a_cli_installed_where_the_sandbox_hides_it() {
        use std::os::unix::fs::{symlink, PermissionsExt};
        let (t, nm) = npm_install_in_tmp();
        let root = nm.parent().unwrap().parent().unwrap().to_path_buf();
        let cwd = Path::new("/");
        let nowhere = Path::new("/nowhere");
        let bins = |argv: &[&str], path: &Path| {
            install_binds(&argv.iter().map(|a| a.to_string()).collect::<Vec<_>>(), path.as_os_str(), cwd)
        };
        let install = |dirs: &[&Path], links: &[(&Path, &str)]| Install {
            dirs: dirs.iter().map(|d| d.to_path_buf()).collect(),
            links: links.iter().map(|(l, t)| (l.to_path_buf(), PathBuf::from(t))).collect(),
        };
        // A project-local install, found on PATH or by path: its node_modules folder (the
        // `.bin` link is inside it).
        assert_eq!(bins(&["fakecli", "exec"], &nm.join(".bin")), install(&[&nm], &[]));
        assert_eq!(bins(&[nm.join(".bin/fakecli").to_str().unwrap()], nowhere), install(&[&nm], &[]));
        // pnpm's `.bin` entries are scripts, no links: the node_modules folder all the same.
        std::fs::write(nm.join(".bin/pnpmcli"), "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(nm.join(".bin/pnpmcli"), std::fs::Permissions::from_mode(0o755)).unwrap();
        assert_eq!(bins(&["pnpmcli"], &nm.join(".bin")), install(&[&nm], &[]));
        // A global install (`<prefix>/bin` → `<prefix>/lib/node_modules`): the link made
        // again, the package bound.
        let prefix = root.join("prefix");
        std::fs::create_dir_all(prefix.join("bin")).unwrap();
        std::fs::create_dir_all(prefix.join("lib")).unwrap();
        std::fs::rename(&nm, prefix.join("lib/node_modules")).unwrap();
        let (gm, gcli) = (prefix.join("lib/node_modules"), prefix.join("lib/node_modules/@x/cli/bin/cli.sh"));
        let rel = "../lib/node_modules/@x/cli/bin/cli.sh";
        symlink(rel, prefix.join("bin/fakecli")).unwrap();
        let bin_link = prefix.join("bin/fakecli");
        assert_eq!(bins(&["fakecli"], nowhere), Install::default());
        assert_eq!(bins(&[bin_link.to_str().unwrap()], nowhere), install(&[&gm], &[(&bin_link, rel)]));
        // A standalone file: itself alone.
        let solo = root.join("solo");
        std::fs::write(&solo, "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(&solo, std::fs::Permissions::from_mode(0o755)).unwrap();
        assert_eq!(bins(&["solo"], &root).dirs, [solo]);
        // A link at the top of /tmp: never all of /tmp; each link on the way made again.
        let top = tempfile::Builder::new().prefix("fl-top").tempfile_in("/tmp").unwrap().into_temp_path();
        let top = top.to_path_buf();
        std::fs::remove_file(&top).unwrap();
        symlink(&bin_link, &top).unwrap();
        let got = bins(&[top.to_str().unwrap()], nowhere);
        std::fs::remove_file(&top).unwrap();
        assert_eq!(got, install(&[&gm], &[(&top, bin_link.to_str().unwrap()), (&bin_link, rel)]));
        // The interpreter of its `#!` line, found on PATH, when the sandbox hides it too.
        let node = root.join("node/bin/fakenode");
        std::fs::create_dir_all(node.parent().unwrap()).unwrap();
        std::fs::write(&node, "").unwrap();
        std::fs::set_permissions(&node, std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::write(&gcli, "#!/usr/bin/env -S -u FOO fakenode --flag\n").unwrap();
        let path = std::env::join_paths([prefix.join("bin"), node.parent().unwrap().to_path_buf()]).unwrap();
        assert_eq!(bins(&["fakecli"], Path::new(&path)), install(&[&gm, &node], &[(&bin_link, rel)]));
        // Visible programs and unknown names bind nothing.
        assert_eq!(bins(&["sh"], Path::new("/bin:/usr/bin")), Install::default());
        assert_eq!(bins(&["no-such-cli"], &prefix.join("bin")), install(&[], &[]));
        drop(t);
    }

    /// A user's runtime folder (a stand-in here) is never bound whole, and a `PATH` folder
    /// reached through a link there (fnm's) is made again as that link, which shows only
    /// what is visible already: the program and what lies beside it (`npm`) are found.
    #[test]
    fn install_binds_never_bind_a_runtime_folder() {
        use std::os::unix::fs::symlink;
        let t = tempfile::tempdir_in(outside_tmp()).unwrap();
        let t = t.path().canonicalize().unwrap();
        let (run_user, rt) = (t.join("run/user"), t.join("run/user/0"));
        let folders =
            Folders { hidden: vec![run_user.clone()], never: vec![run_user.clone(), rt.clone()], visible: vec![] };
        std::fs::create_dir_all(rt.join("bin")).unwrap();
        std::fs::create_dir_all(rt.join("lib/node_modules/@x/cli/bin")).unwrap();
        let cli = rt.join("lib/node_modules/@x/cli/bin/cli.js");
        std::fs::write(&cli, "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(&cli, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
        let rel = "../lib/node_modules/@x/cli/bin/cli.js";
        symlink(rel, rt.join("bin/codex")).unwrap();
        let argv = vec!["codex".to_string()];
        let got = install_binds_in(&argv, rt.join("bin").as_os_str(), Path::new("/"), &folders);
        assert_eq!(
            got,
            Install { dirs: vec![rt.join("lib/node_modules")], links: vec![(rt.join("bin/codex"), rel.into())] }
        );
        // The program at the top of the runtime folder: the file alone.
        std::fs::write(rt.join("solo"), "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(rt.join("solo"), std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
        let got = install_binds_in(&["solo".into()], rt.as_os_str(), Path::new("/"), &folders);
        assert_eq!(got, Install { dirs: vec![rt.join("solo")], links: vec![] });
        // fnm: `<rt>/fnm_multishells/<id>` links to an installation outside.
        let inst = t.join("fnm/installation");
        std::fs::create_dir_all(inst.join("bin")).unwrap();
        std::fs::create_dir_all(inst.join("lib/node_modules/@x/cli/bin")).unwrap();
        let icli = inst.join("lib/node_modules/@x/cli/bin/cli.js");
        std::fs::write(&icli, "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(&icli, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
        symlink(rel, inst.join("bin/codex")).unwrap();
        std::fs::create_dir_all(rt.join("fnm_multishells")).unwrap();
        symlink(&inst, rt.join("fnm_multishells/1_2")).unwrap();
        let path = rt.join("fnm_multishells/1_2/bin");
        let got = install_binds_in(&argv, path.as_os_str(), Path::new("/"), &folders);
        assert_eq!(got, Install { dirs: vec![], links: vec![(rt.join("fnm_multishells/1_2"), inst.clone())] });
        // The same link for a PATH folder alone (the program elsewhere).
        let sh = vec!["sh".to_string()];
        let fnm_link = vec![(rt.join("fnm_multishells/1_2"), inst.clone())];
        let got = install_binds_in(
            &sh,
            std::env::join_paths([path.as_path(), Path::new("/bin")]).unwrap().as_os_str(),
            Path::new("/"),
            &folders,
        );
        assert_eq!(got, Install { dirs: vec![], links: fnm_link.clone() });
        // ... and for a PATH folder spelled outside that leads through it.
        symlink(rt.join("fnm_multishells/1_2"), t.join("current")).unwrap();
        let got = install_binds_in(&sh, t.join("current/bin").as_os_str(), Path::new("/"), &folders);
        assert_eq!(got, Install { dirs: vec![], links: fnm_link });
        // No link is made at a folder never bound (a runtime folder that is a link itself).
        let never_link = Folders { never: vec![run_user.clone(), rt.join("fnm_multishells/1_2")], ..folders };
        assert_eq!(install_binds_in(&argv, path.as_os_str(), Path::new("/"), &never_link), Install::default());
        // A home bound back inside a hidden folder is visible: nothing of it is made again.
        let home = rt.join("home");
        std::fs::create_dir_all(home.join(".local/bin")).unwrap();
        std::fs::create_dir_all(home.join(".local/lib")).unwrap();
        std::fs::rename(rt.join("lib/node_modules"), home.join(".local/lib/node_modules")).unwrap();
        symlink(rel, home.join(".local/bin/codex")).unwrap();
        let with_home = Folders { visible: vec![home.clone()], ..never_link };
        assert_eq!(
            install_binds_in(&argv, home.join(".local/bin").as_os_str(), Path::new("/"), &with_home),
            Install::default()
        );
    }

    /// The home given back in a hidden folder: bound at the path it resolves to when that
    /// is hidden, and reached through the links in hidden folders on the way, made again.
    #[test]
    fn a_home_in_a_hidden_folder_is_given_back_where_it_resolves() {
        use std::os::unix::fs::symlink;
        let t = tempfile::tempdir_in(outside_tmp()).unwrap();
        let t = t.path().canonicalize().unwrap();
        let (rt, elsewhere) = (t.join("run/user/0"), t.join("srv"));
        std::fs::create_dir_all(rt.join("home")).unwrap();
        std::fs::create_dir_all(elsewhere.join("h")).unwrap();
        let hidden = vec![t.join("run/user")];
        // Spelled as it is: bound there.
        let home = rt.join("home");
        assert_eq!(restore(&home, &hidden), Some(RestoredHome { real: home.clone(), bind: true, links: vec![] }));
        // A link in the hidden folder to a home outside it: the link alone (the secrets,
        // hidden where they resolve, then cover it under both spellings).
        symlink(elsewhere.join("h"), rt.join("hl")).unwrap();
        assert_eq!(
            restore(&rt.join("hl"), &hidden),
            Some(RestoredHome {
                real: elsewhere.join("h"),
                bind: false,
                links: vec![(rt.join("hl"), elsewhere.join("h"))]
            })
        );
        // A link outside into the hidden folder: bound where it resolves.
        symlink(&home, elsewhere.join("to-run")).unwrap();
        assert_eq!(
            restore(&elsewhere.join("to-run"), &hidden),
            Some(RestoredHome { real: home, bind: true, links: vec![] })
        );
        // Nothing hidden on the way: nothing to give back.
        assert_eq!(restore(&elsewhere.join("h"), &hidden), None);
        assert_eq!(restore(&t.join("missing"), &hidden), None);
    }

    /// Links are made once each, and not where a later mount goes through.
    #[test]
    fn links_are_made_once_and_not_on_the_way_to_a_mount() {
        let wt = worktree();
        let w = wt.path().to_path_buf();
        let s = Sandbox {
            install_links: vec![
                (PathBuf::from("/tmp/fl-a"), PathBuf::from("/srv/a")),
                (PathBuf::from("/tmp/fl-a"), PathBuf::from("/srv/a")),
                (w.parent().unwrap().to_path_buf(), PathBuf::from("/srv/wt")),
                (PathBuf::from("/tmp/fl-b/c"), PathBuf::from("../d")),
                (PathBuf::from("/tmp/fl-pkg/node_modules/.bin/x"), PathBuf::from("../x/x.js")),
            ],
            install_dirs: vec![PathBuf::from("/tmp/fl-pkg/node_modules")],
            ..sandbox(&w)
        };
        let args: Vec<String> = s.head_args().into_iter().map(|a| a.to_string_lossy().into_owned()).collect();
        let links: Vec<&[String]> = args.windows(3).filter(|w| w[0] == "--symlink").collect();
        assert_eq!(links, [["--symlink", "/srv/a", "/tmp/fl-a"], ["--symlink", "../d", "/tmp/fl-b/c"]], "{args:?}");
    }

    #[test]
    fn walk_meets_each_link_and_resolves_as_realpath() {
        use std::os::unix::fs::symlink;
        let t = tempfile::tempdir_in(outside_tmp()).unwrap();
        let t = t.path().canonicalize().unwrap();
        std::fs::create_dir_all(t.join("a/b")).unwrap();
        std::fs::write(t.join("a/b/f"), "").unwrap();
        symlink("a/b", t.join("ab")).unwrap();
        symlink("../ab/f", t.join("a/lf")).unwrap();
        symlink(t.join("a/lf"), t.join("abs")).unwrap();
        symlink("loop", t.join("loop")).unwrap();
        let (met, real) = walk(&t.join("abs"));
        assert_eq!(real, Some(t.join("a/b/f")));
        assert_eq!(
            met,
            [
                (t.join("abs"), t.join("a/lf")),
                (t.join("a/lf"), PathBuf::from("../ab/f")),
                (t.join("ab"), PathBuf::from("a/b"))
            ]
        );
        assert_eq!(walk(&t.join("a/../ab/./f")), (vec![(t.join("ab"), PathBuf::from("a/b"))], Some(t.join("a/b/f"))));
        assert_eq!(walk(&t.join("loop")).1, None);
        assert_eq!(walk(&t.join("missing/x")).1, None);
        assert_eq!(walk(Path::new("relative")).1, None);
    }

    #[test]
    fn the_program_of_an_env_line() {
        let p = |s: &str| env_program(s.split_ascii_whitespace());
        assert_eq!(p("node"), Some("node".into()));
        assert_eq!(p("-S node --flag"), Some("node".into()));
        assert_eq!(p("-Snode --flag"), Some("node".into()));
        assert_eq!(p("-S -u FOO node"), Some("node".into()));
        assert_eq!(p("--split-string=node -x"), Some("node".into()));
        assert_eq!(p("-i A=1 -C /x -a name node"), Some("node".into()));
        assert_eq!(p("--unset FOO -- node"), Some("node".into()));
        assert_eq!(p("-u"), None);
        assert_eq!(p(""), None);
    }

    /// A command killed by its turn's end (which kills it before the next "still wanted"
    /// check) is answered as stopped, not as killed by a signal (review YI).
    #[tokio::test]
    async fn a_command_killed_as_its_turn_ends_is_stopped() {
        let dir = tempfile::tempdir().unwrap();
        let pid_file = dir.path().join("pid");
        let wanted = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
        let w = wanted.clone();
        let check: Box<dyn Fn() -> bool + Send + Sync> = Box::new(move || w.load(std::sync::atomic::Ordering::SeqCst));
        let mut cmd = tokio::process::Command::new("/bin/sh");
        cmd.args(["-c", &format!("echo $$ > {}; exec sleep 30", pid_file.display())]);
        let run = tokio::spawn(run_captured_while(cmd, Duration::from_secs(60), Some(check)));
        let pid = loop {
            match std::fs::read_to_string(&pid_file).ok().and_then(|p| p.trim().parse::<i32>().ok()) {
                Some(pid) => break pid,
                None => tokio::time::sleep(Duration::from_millis(10)).await,
            }
        };
        // The turn's end: no longer wanted, and its processes killed at once.
        wanted.store(false, std::sync::atomic::Ordering::SeqCst);
        // SAFETY: a process group this test started.
        unsafe { libc::kill(-pid, libc::SIGKILL) };
        let c = run.await.unwrap().unwrap();
        assert!(c.stopped && !c.timed_out && c.exit_code.is_none(), "{c:?}");
        assert!(shell_result(&c, 60_000, true).text.starts_with("Stopped: "));
    }

    /// DD 6: a CLI installed under `/tmp` starts in the sandbox (its sibling package
    /// too), and a secret inside its install folder is still hidden.
    #[tokio::test]
    async fn a_cli_installed_under_tmp_runs_in_the_sandbox_and_its_folder_keeps_secrets_hidden() {
        let (_t, nm) = npm_install_in_tmp();
        std::fs::write(nm.join(".token"), "SECRET-TOKEN").unwrap();
        let wt = worktree();
        let argv = vec!["fakecli".to_string()];
        let s = Sandbox {
            install_dirs: install_binds(&argv, nm.join(".bin").as_os_str(), wt.path()).dirs,
            secrets: Secrets { hide: vec![nm.join(".token").display().to_string()], ..Secrets::default() },
            ..sandbox(wt.path())
        };
        assert_eq!(s.install_dirs, vec![nm.clone()]);
        let mut cmd = s.command(
            &bwrap(),
            &["/bin/sh".into(), "-c".into(), format!("fakecli; echo \"[$(cat {})]\"", nm.join(".token").display())],
            wt.path(),
        );
        cmd.env("PATH", format!("{}:/usr/bin:/bin", nm.join(".bin").display()));
        let c = run_captured(cmd, Duration::from_secs(30)).await.expect("run");
        assert_eq!(c.stdout, "payload-ran\n[]\n", "{c:?}");
        // Without the binds the sandbox's own /tmp hides it.
        let s = Sandbox { install_dirs: vec![], ..s };
        let mut cmd = s.command(&bwrap(), &["/bin/sh".into(), "-c".into(), "fakecli".into()], wt.path());
        cmd.env("PATH", format!("{}:/usr/bin:/bin", nm.join(".bin").display()));
        let c = run_captured(cmd, Duration::from_secs(30)).await.expect("run");
        assert!(c.stdout.is_empty() && c.stderr.contains("not found"), "{c:?}");
    }

    /// The links on the way are made again inside: a global install under /tmp
    /// (`<prefix>/bin/fakecli` → `../lib/node_modules/…`), and a `PATH` folder reached
    /// through a link in /tmp to a folder outside (fnm's), whose other programs are found too.
    #[tokio::test]
    async fn links_on_the_way_to_a_cli_under_tmp_are_made_again_inside() {
        let (_t, nm) = npm_install_in_tmp();
        let prefix = nm.parent().unwrap().join("prefix");
        std::fs::create_dir_all(prefix.join("bin")).unwrap();
        std::fs::create_dir_all(prefix.join("lib")).unwrap();
        std::fs::rename(&nm, prefix.join("lib/node_modules")).unwrap();
        std::os::unix::fs::symlink("../lib/node_modules/@x/cli/bin/cli.sh", prefix.join("bin/fakecli")).unwrap();
        let outside = tempfile::Builder::new().prefix("fl-fnm").tempdir_in(outside_tmp()).unwrap();
        let inst = outside.path().canonicalize().unwrap();
        std::fs::create_dir_all(inst.join("bin")).unwrap();
        write_program(&inst.join("bin/fakenpm"), "#!/bin/sh\necho npm-ran\n");
        let shell = prefix.parent().unwrap().join("multishell");
        std::os::unix::fs::symlink(&inst, &shell).unwrap();
        let path = format!("{}:{}:/usr/bin:/bin", prefix.join("bin").display(), shell.join("bin").display());
        let wt = worktree();
        let install = install_binds(&["fakecli".to_string()], OsStr::new(&path), wt.path());
        assert_eq!(install.dirs, [prefix.join("lib/node_modules")]);
        let s = Sandbox { install_dirs: install.dirs, install_links: install.links, ..sandbox(wt.path()) };
        let mut cmd = s.command(&bwrap(), &["fakecli".into()], wt.path());
        cmd.env("PATH", &path);
        let c = run_captured(cmd, Duration::from_secs(30)).await.expect("run");
        assert_eq!(c.stdout, "payload-ran\n", "{c:?}");
        // Of the install's folder only the package and the links are there.
        let script = format!("fakenpm; ls -A {}; ls -A {}", prefix.display(), prefix.parent().unwrap().display());
        let mut cmd = s.command(&bwrap(), &["/bin/sh".into(), "-c".into(), script], wt.path());
        cmd.env("PATH", &path);
        let c = run_captured(cmd, Duration::from_secs(30)).await.expect("run");
        assert_eq!(c.stdout, "npm-ran\nbin\nlib\nmultishell\nprefix\n", "{c:?}");
    }

    /// A shell's sandbox (`forge.shell`, the agent's shells, plugin tools) makes the links
    /// on the way to its `PATH` folders again too: a program in fnm's `PATH` folder, a link
    /// in a hidden folder to an install outside, is found (before: `not found`).
    #[tokio::test]
    async fn a_shell_finds_programs_through_a_path_folder_linked_in_a_hidden_folder() {
        let outside = tempfile::Builder::new().prefix("fl-fnm").tempdir_in(outside_tmp()).unwrap();
        let inst = outside.path().canonicalize().unwrap();
        std::fs::create_dir_all(inst.join("bin")).unwrap();
        write_program(&inst.join("bin/fakenode"), "#!/bin/sh\necho node-ran\n");
        let hidden = tempfile::Builder::new().prefix("fl-multishells").tempdir().unwrap();
        let shell = hidden.path().join("1_2");
        std::os::unix::fs::symlink(&inst, &shell).unwrap();
        let path = format!("{}:/usr/bin:/bin", shell.join("bin").display());
        let wt = worktree();
        let run = |s: &Sandbox| {
            let mut cmd = s.command(&bwrap(), &["/bin/sh".into(), "-c".into(), "fakenode".into()], wt.path());
            cmd.env("PATH", &path);
            run_captured(cmd, Duration::from_secs(30))
        };
        let s = sandbox(wt.path()).with_path_links(OsStr::new(&path));
        assert_eq!(s.install_links, [(shell.clone(), inst.clone())]);
        assert!(s.install_dirs.is_empty());
        let c = run(&s).await.expect("run");
        assert_eq!(c.stdout, "node-ran\n", "{c:?}");
        let c = run(&sandbox(wt.path())).await.expect("run");
        assert!(c.stdout.is_empty() && c.stderr.contains("not found"), "without the link: {c:?}");
    }

    fn worktree() -> tempfile::TempDir {
        tempfile::Builder::new().prefix("fl-sbx").tempdir().expect("tempdir")
    }

    /// An executable file at `path` with `text`.
    fn write_program(path: &Path, text: &str) {
        std::fs::write(path, text).unwrap();
        std::fs::set_permissions(path, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    }

    async fn run_in(s: &Sandbox, script: &str) -> Captured {
        let wt = s.worktree.clone();
        let cmd = s.command(&bwrap(), &["/bin/sh".into(), "-c".into(), script.into()], &wt);
        run_captured(cmd, Duration::from_secs(30)).await.expect("run")
    }

    #[tokio::test]
    async fn writes_only_inside_the_worktree() {
        let wt = worktree();
        let other = worktree();
        let s = sandbox(wt.path());
        let target = other.path().join("escaped");
        let c = run_in(
            &s,
            &format!(
                "touch inside && echo ok; touch /forge-sandbox-outside-file; touch {}; echo hi > $HOME/.forge-sbx-test",
                target.display()
            ),
        )
        .await;
        assert_eq!(c.stdout.trim(), "ok", "{c:?}");
        assert!(wt.path().join("inside").exists());
        assert!(!Path::new("/forge-sandbox-outside-file").exists());
        assert!(!target.exists(), "wrote into another temp dir: {c:?}");
        assert!(c.stderr.contains("Read-only file system"), "{c:?}");
    }

    /// The worktree's `.git` file is read-only inside: a command cannot point the server's
    /// checkpoints at another repository (`git::open_worktree` refuses that too).
    #[tokio::test]
    async fn the_worktrees_git_file_cannot_be_changed_inside() {
        let wt = worktree();
        let git = wt.path().join(".git");
        std::fs::write(&git, "gitdir: /somewhere/.git/worktrees/x\n").unwrap();
        let c = run_in(
            &sandbox(wt.path()),
            "echo 'gitdir: /elsewhere/.git' > .git; rm -f .git; mv .git moved; echo x > other && echo inside-ok",
        )
        .await;
        assert_eq!(c.stdout.trim(), "inside-ok", "{c:?}");
        assert_eq!(std::fs::read_to_string(&git).unwrap(), "gitdir: /somewhere/.git/worktrees/x\n", "{c:?}");
        assert!(!wt.path().join("moved").exists(), "{c:?}");
    }

    #[tokio::test]
    async fn sees_the_worktree_at_its_host_path_and_a_private_tmp() {
        let wt = worktree();
        let s = sandbox(wt.path());
        let marker = std::env::temp_dir().join(format!("fl-sbx-marker-{}", std::process::id()));
        std::fs::write(&marker, "x").unwrap();
        let c = run_in(
            &s,
            &format!("pwd; test -e {} && echo visible || echo hidden; echo $FORGE_SANDBOX", marker.display()),
        )
        .await;
        let _ = std::fs::remove_file(&marker);
        let lines: Vec<&str> = c.stdout.lines().collect();
        assert_eq!(lines, vec![wt.path().to_str().unwrap(), "hidden", "1"], "{c:?}");
    }

    #[tokio::test]
    async fn no_network_unless_enabled() {
        let wt = worktree();
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        // bash's /dev/tcp is the portable client here; sh has none.
        let probe =
            format!("if (exec 3<>/dev/tcp/127.0.0.1/{port}) 2>/dev/null; then echo connected; else echo refused; fi");
        let bash = real_shell("bash").expect("bash");
        let run = |network: bool| {
            let s = Sandbox { network, ..sandbox(wt.path()) };
            let cmd = s.command(&bwrap(), &[bash.display().to_string(), "-c".into(), probe.clone()], wt.path());
            run_captured(cmd, Duration::from_secs(30))
        };
        let off = run(false).await.unwrap();
        assert_eq!(off.stdout.trim(), "refused", "a listener outside must be unreachable: {off:?}");
        let on = run(true).await.unwrap();
        assert_eq!(on.stdout.trim(), "connected", "with network the host's loopback is shared: {on:?}");
        // Only a fresh loopback inside.
        let s = sandbox(wt.path());
        let c = run_in(&s, "cat /proc/net/dev | tail -n +3 | cut -d: -f1 | tr -d ' '").await;
        assert_eq!(c.stdout.trim(), "lo", "{c:?}");
        drop(listener);
    }

    /// A command run for something that ends meanwhile (a turn) is killed then, and says so.
    #[tokio::test]
    async fn a_command_no_longer_wanted_is_killed() {
        let wanted = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
        let w = wanted.clone();
        let mut cmd = tokio::process::Command::new("sh");
        cmd.args(["-c", "echo started; exec sleep 30"]);
        let started = std::time::Instant::now();
        let run = tokio::spawn(run_captured_while(
            cmd,
            Duration::from_secs(60),
            Some(Box::new(move || w.load(std::sync::atomic::Ordering::SeqCst))),
        ));
        tokio::time::sleep(Duration::from_millis(300)).await;
        wanted.store(false, std::sync::atomic::Ordering::SeqCst);
        let c = run.await.unwrap().unwrap();
        assert!(c.stopped && !c.timed_out, "{c:?}");
        assert!(started.elapsed() < Duration::from_secs(10));
        assert_eq!(c.stdout, "started\n");
        let r = shell_result(&c, 60_000, false);
        assert!(r.text.starts_with("Stopped: the turn it ran for ended"), "{}", r.text);
    }

    #[tokio::test]
    async fn the_shim_runs_shells_sandboxed() {
        let wt = worktree();
        let s = sandbox(wt.path());
        let data = tempfile::tempdir().unwrap();
        let dir = s.write_shim(&bwrap(), data.path()).expect("shim");
        assert_eq!(dir, shim_dir(data.path(), wt.path()));
        assert!(dir.starts_with(data.path().join("shims")));
        let sh = dir.join("sh");
        {
            use std::os::unix::fs::PermissionsExt;
            assert_eq!(std::fs::metadata(&sh).unwrap().permissions().mode() & 0o777, 0o755);
        }
        // Run it as the agent would: through PATH, from the worktree.
        let path = format!("{}:{}", dir.display(), std::env::var("PATH").unwrap_or_default());
        let mut cmd = tokio::process::Command::new("sh");
        cmd.args(["-c", "echo $$; touch x; echo $FORGE_SANDBOX; touch /forge-shim-outside 2>/dev/null || echo ro; sh -c 'echo nested $FORGE_SANDBOX'; touch \"$1/planted\" 2>/dev/null || echo shims-ro", "sh", dir.to_str().unwrap()])
            .env("PATH", &path)
            .env_remove(INSIDE_ENV)
            .current_dir(wt.path());
        let c = run_captured(cmd, Duration::from_secs(30)).await.unwrap();
        let lines: Vec<&str> = c.stdout.lines().collect();
        // Pid 2 in a fresh pid namespace (bwrap's init is 1).
        assert_eq!(lines, vec!["2", "1", "ro", "nested 1", "shims-ro"], "{c:?}");
        assert!(wt.path().join("x").exists());
        assert!(!dir.join("planted").exists());
        // bash too, with arguments passed through verbatim.
        let c = run_captured(
            {
                let mut b = tokio::process::Command::new(dir.join("bash"));
                b.args(["-c", "printf '%s|' \"$0\" \"$@\"; echo $FORGE_SANDBOX", "n a m e", "it's", ""])
                    .current_dir(wt.path());
                b
            },
            Duration::from_secs(30),
        )
        .await
        .unwrap();
        assert_eq!(c.stdout.trim(), "n a m e|it's||1", "{c:?}");
        // Many arguments, and ones that look like the shim's own variables or commands,
        // come through exactly.
        let mut many: Vec<String> = (1..=3000).map(|i| i.to_string()).collect();
        many.extend(["$forge_m".to_string(), "$(echo pwned)".into(), "\"$@\"".into(), "--bind / /".into()]);
        let c = run_captured(
            {
                let mut b = tokio::process::Command::new(dir.join("sh"));
                b.args(["-c", "echo $#; shift 3000; printf '%s|' \"$@\"", "zero"]).args(&many).current_dir(wt.path());
                b
            },
            Duration::from_secs(60),
        )
        .await
        .unwrap();
        assert_eq!(c.stdout, "3004\n$forge_m|$(echo pwned)|\"$@\"|--bind / /|", "{}", c.stderr);
        // The agent's secret-named variables stay outside; Forge's own go in.
        for shim in ["sh", "bash", "prefix"] {
            let script = "echo ${OPENAI_API_KEY:-unset} ${FORGE_SESSION_TOKEN:-unset} ${FORGE_SANDBOX:-host}";
            let mut b = through_shim(&dir, shim, script, wt.path());
            b.env("OPENAI_API_KEY", "sk-secret").env("FORGE_SESSION_TOKEN", "tok");
            let c = run_captured(b, Duration::from_secs(30)).await.unwrap();
            assert_eq!(c.stdout.trim(), "unset tok 1", "{shim}: {c:?}");
        }
        // prefix: one argument, a whole command line (Claude Code's shell prefix).
        let line = "echo \"$FORGE_SANDBOX\" 'a  b'; touch y && touch /forge-prefix-outside 2>/dev/null || echo ro";
        let c = run_captured(through_shim(&dir, "prefix", line, wt.path()), Duration::from_secs(30)).await.unwrap();
        assert_eq!(c.stdout.trim(), "1 a  b\nro", "{c:?}");
        assert!(wt.path().join("y").exists() && !Path::new("/forge-prefix-outside").exists());
        // FORGE_SANDBOX set on the host (an agent CLI's settings could set it for its
        // shells) does not make a shim skip the sandbox: the pid namespace is the host's,
        // even with a `readlink` of the agent's first on PATH that names another one.
        let fake = tempfile::tempdir().unwrap();
        std::fs::write(fake.path().join("readlink"), "#!/bin/sh\necho 'pid:[1]'\n").unwrap();
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(fake.path().join("readlink"), std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        let fake_path = format!("{}:{}", fake.path().display(), std::env::var("PATH").unwrap_or_default());
        for shim in ["sh", "bash", "prefix"] {
            let mut b =
                through_shim(&dir, shim, "echo $$; touch /forge-shim-env-outside 2>/dev/null || echo ro", wt.path());
            b.env(INSIDE_ENV, "1").env("PATH", &fake_path);
            let c = run_captured(b, Duration::from_secs(30)).await.unwrap();
            assert_eq!(c.stdout.trim(), "2\nro", "{shim}: {c:?}");
        }
        assert!(!Path::new("/forge-shim-env-outside").exists());
        // Rewriting replaces the files (restart).
        s.write_shim(&bwrap(), data.path()).expect("rewrite");
    }

    #[tokio::test]
    async fn hidden_secrets_are_empty_inside_and_binds_still_show_through() {
        let wt = worktree();
        let outside = tempfile::Builder::new().prefix("fl-secret").tempdir_in(outside_tmp()).unwrap();
        let o = outside.path().canonicalize().unwrap();
        std::fs::create_dir_all(o.join("keys")).unwrap();
        std::fs::write(o.join("keys/id"), "SECRET-KEY").unwrap();
        std::fs::write(o.join("token"), "SECRET-TOKEN").unwrap();
        std::fs::write(o.join("plain"), "visible").unwrap();
        let s = Sandbox {
            secrets: Secrets {
                hide: vec![o.join("keys").display().to_string(), o.join("token").display().to_string()],
                ..Secrets::default()
            },
            // A bind under a hidden folder shows through (a worktree or a socket there).
            ro_binds: vec![o.join("keys/id")],
            ..sandbox(wt.path())
        };
        let c = run_in(
            &s,
            &format!(
                "cat {o}/token; echo \"[$(cat {o}/token)]\"; ls -A {o}/keys; cat {o}/keys/id; echo; cat {o}/plain",
                o = o.display()
            ),
        )
        .await;
        assert_eq!(c.stdout, "[]\nid\nSECRET-KEY\nvisible", "{c:?}");
        let s = Sandbox {
            secrets: Secrets { hide: vec![o.join("keys").display().to_string()], ..Secrets::default() },
            ..sandbox(wt.path())
        };
        let c = run_in(&s, &format!("ls -A {o}/keys | wc -l; cat {o}/token", o = o.display())).await;
        assert_eq!(c.stdout, "0\nSECRET-TOKEN", "{c:?}");
    }

    /// A shim looks at the secrets as each shell starts: one removed after the loop started
    /// does not break its shells (bubblewrap would fail to mount over it), and one that
    /// appeared since is hidden, the data directory's `agent-homes` included.
    #[tokio::test]
    async fn the_shims_hide_the_secrets_there_are_when_a_shell_starts() {
        let wt = worktree();
        let outside = tempfile::Builder::new().prefix("fl-sec").tempdir_in(outside_tmp()).unwrap();
        let o = outside.path().canonicalize().unwrap();
        let data = o.join("data");
        std::fs::create_dir_all(&data).unwrap();
        std::fs::write(o.join("gone"), "GONE").unwrap();
        std::fs::create_dir_all(o.join("gonedir")).unwrap();
        let hide = ["gone", "gonedir", "later", "laterdir", "evil/x86_64-linux-gnu", "abs/x86_64-linux-gnu"]
            .map(|n| o.join(n).display().to_string())
            .to_vec();
        let s = Sandbox { secrets: Secrets { hide, ..Secrets::default() }, ..sandbox(wt.path()) }.with_shims(&data);
        let dir = s.write_shim(&bwrap(), &data).expect("shim");
        std::fs::remove_file(o.join("gone")).unwrap();
        std::fs::remove_dir(o.join("gonedir")).unwrap();
        std::fs::write(o.join("later"), "LATER").unwrap();
        std::fs::create_dir_all(o.join("laterdir")).unwrap();
        std::fs::write(o.join("laterdir/k"), "K").unwrap();
        std::fs::create_dir_all(data.join("agent-homes/x/codex")).unwrap();
        std::fs::write(data.join("agent-homes/x/codex/auth.json"), "AUTH").unwrap();
        // A link made on the way of a hidden path since (a build in the worktree could make
        // one): the mount would follow it onto /usr/lib and break every shell. Left out.
        let up = "../".repeat(o.components().count() - 1);
        std::os::unix::fs::symlink(format!("{up}usr/lib"), o.join("evil")).unwrap();
        std::os::unix::fs::symlink("/usr/lib", o.join("abs")).unwrap();
        let probe = format!(
            "echo ${{FORGE_SANDBOX:-host}} [$(cat {o}/later)] [$(ls -A {o}/laterdir)] [$(cat {d}/agent-homes/x/codex/auth.json 2>/dev/null)]",
            o = o.display(),
            d = data.display()
        );
        for shim in ["sh", "bash", "prefix"] {
            let c = run_captured(through_shim(&dir, shim, &probe, wt.path()), Duration::from_secs(30)).await.unwrap();
            assert_eq!(c.stdout.trim(), "1 [] [] []", "{shim}: {c:?}");
        }
        // A command started per call (forge.shell) looks at them then too.
        let c = run_in(&s, &probe).await;
        assert_eq!(c.stdout.trim(), "1 [] [] []", "{c:?}");
        // On the host all of it is there (the control).
        let c = run_captured(
            {
                let mut b = tokio::process::Command::new("/bin/sh");
                b.args(["-c", &probe]);
                b
            },
            Duration::from_secs(30),
        )
        .await
        .unwrap();
        assert_eq!(c.stdout.trim(), "host [LATER] [k] [AUTH]", "{c:?}");
    }

    #[tokio::test]
    async fn timeout_kills_the_process_group() {
        let wt = worktree();
        let s = sandbox(wt.path());
        let started = std::time::Instant::now();
        let cmd =
            s.command(&bwrap(), &["/bin/sh".into(), "-c".into(), "echo start; sleep 30 & sleep 30".into()], wt.path());
        let c = run_captured(cmd, Duration::from_millis(500)).await.unwrap();
        assert!(c.timed_out && c.exit_code.is_none(), "{c:?}");
        assert_eq!(c.stdout, "start\n");
        assert!(started.elapsed() < Duration::from_secs(10), "{:?}", started.elapsed());
        // Without a sandbox too, including a background child holding the pipe.
        let mut plain = tokio::process::Command::new("/bin/sh");
        plain.args(["-c", "sleep 30 & echo bg"]).current_dir(wt.path());
        let started = std::time::Instant::now();
        let c = run_captured(plain, Duration::from_secs(20)).await.unwrap();
        assert_eq!((c.exit_code, c.timed_out, c.stdout.as_str()), (Some(0), false, "bg\n"), "{c:?}");
        assert!(started.elapsed() < Duration::from_secs(5), "{:?}", started.elapsed());
    }

    #[tokio::test]
    async fn output_is_capped_at_one_mib() {
        let wt = worktree();
        let s = sandbox(wt.path());
        let c = run_in(&s, "head -c 3000000 /dev/zero | tr '\\0' a; echo err >&2").await;
        assert_eq!(c.stdout.len(), OUTPUT_CAP);
        assert_eq!(c.stdout_bytes, 3_000_000);
        assert!(c.stdout_truncated() && !c.stderr_truncated());
        let r = shell_result(&c, 1000, true);
        assert!(r.text.starts_with("Exit code: 0"), "{}", &r.text[..100]);
        assert!(r.text.contains("[stdout truncated: kept the first 1048576 of 3000000 bytes]"));
        assert_eq!(r.data["stdoutTruncated"], true);
        assert_eq!(r.data["stderr"], "err\n");
        assert_eq!(r.data["timedOut"], false);
    }

    #[test]
    fn cwd_is_relative_and_stays_inside() {
        assert_eq!(normalize_cwd(None).unwrap(), "");
        assert_eq!(normalize_cwd(Some(".")).unwrap(), "");
        assert_eq!(normalize_cwd(Some("src/./a/../b/")).unwrap(), "src/b");
        assert!(normalize_cwd(Some("/etc")).unwrap_err().contains("absolute"));
        assert!(normalize_cwd(Some("..")).unwrap_err().contains("leaves"));
        assert!(normalize_cwd(Some("a/../../x")).unwrap_err().contains("leaves"));
    }

    #[test]
    fn a_missing_bwrap_says_how_to_fix_it() {
        for e in [
            locate(Some("/nonexistent/bwrap".as_ref()), None).unwrap_err(),
            locate(None, Some("/nonexistent-dir:/also-not-there".as_ref())).unwrap_err(),
        ] {
            assert!(e.contains("apt-get install bubblewrap") && e.contains("sandbox.enabled = false"), "{e}");
        }
        assert!(locate(Some("/nonexistent/bwrap".as_ref()), None)
            .unwrap_err()
            .contains("FORGE_BWRAP=/nonexistent/bwrap"));
    }
}
