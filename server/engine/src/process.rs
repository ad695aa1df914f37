//! Process groups of agent turns and sandboxed commands, and the environment marker of
//! the sandbox, and how a restart finds what a dead server's turn left running. A leaf: it
//! imports no other module of this crate.

/// Set inside the sandbox, so a shim knows it is already inside.
pub const INSIDE_ENV: &str = "FORGE_SANDBOX";

/// Kills process group `pgid` (its leader's pid) with SIGKILL. A group that is gone
/// already is not an error.
pub fn kill_group(pgid: u32) {
    let Ok(pgid) = libc::pid_t::try_from(pgid) else { return };
    if pgid <= 1 {
        // 0 would be our own group and 1 would mean every process we may signal.
        return;
    }
    // SAFETY: killpg only sends a signal; it touches no memory of ours.
    let r = unsafe { libc::killpg(pgid, libc::SIGKILL) };
    if r != 0 {
        let e = std::io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::ESRCH) {
            tracing::warn!("cannot kill process group {pgid}: {e}");
        }
    }
}

/// Has `cmd`'s process killed when this server dies (`PR_SET_PDEATHSIG`): a loop's agent,
/// whose turn nobody can end any more, stops working (and spending) at once, and so does a
/// `forge.shell` command, whose time limit nobody enforces any more. What the process
/// started in its group lives on: for a loop's turn, until a restart or cancel ends it
/// ([`kill_orphaned`]).
///
/// The signal follows the thread that spawned the child, not the process: these commands
/// are spawned from the runtime's tasks, whose worker threads (and `block_on`'s main
/// thread) live as long as the server; never from `spawn_blocking`, whose idle threads exit.
pub fn die_with_server(cmd: &mut tokio::process::Command) {
    let server = std::process::id();
    // SAFETY: the closure runs in the child between fork and exec and calls only
    // async-signal-safe functions (prctl, getppid), allocating nothing.
    unsafe {
        cmd.pre_exec(move || {
            // The open-files limit the server started with (forge_core::limits).
            forge_core::limits::restore_in_child();
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong, 0, 0, 0) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            // The server died before the signal was set: the command is not started.
            if u32::try_from(libc::getppid()).ok() != Some(server) {
                return Err(std::io::Error::from_raw_os_error(libc::ESRCH));
            }
            Ok(())
        });
    }
}

/// Gives the process `cmd` starts the open-files limit this server started with
/// (`forge_core::limits`); [`die_with_server`] does it too. For a child without that
/// (an untracked session's agent: review YR found it with the raised limit).
pub fn original_limits(cmd: &mut tokio::process::Command) {
    // SAFETY: the closure runs between fork and exec and only calls getrlimit/setrlimit.
    unsafe {
        cmd.pre_exec(|| {
            forge_core::limits::restore_in_child();
            Ok(())
        });
    }
}

/// Which process led an agent turn's process group: its pid (the group's id) and the boot
/// it ran in. Recorded in the store while the turn runs (`loop_sessions.agent_process`), so
/// that a restart or cancel after the server that ran the turn died can end what the turn
/// left running ([`kill_orphaned`], which tells the turn's group from a stranger's that got
/// the same id by the session in its processes' environment).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Leader {
    pub pid: u32,
    pub boot: String,
}

impl Leader {
    /// The leader `pid` in this boot; `None` when the boot id cannot be read.
    pub fn of(pid: u32) -> Option<Leader> {
        Some(Leader { pid, boot: boot_id()? })
    }

    /// The stored form: `<pid> <boot id>`.
    pub fn record(&self) -> String {
        format!("{} {}", self.pid, self.boot)
    }

    /// Reads [`Leader::record`]'s form back; `None` for anything else.
    pub fn parse(s: &str) -> Option<Leader> {
        let (pid, boot) = s.split_once(' ')?;
        let pid = pid.parse().ok()?;
        (!boot.is_empty() && !boot.contains(' ')).then(|| Leader { pid, boot: boot.to_string() })
    }
}

/// The process group (field 5) of a `/proc/<pid>/stat` line, when the process has not
/// exited (a zombie has none to kill). The command name (field 2) is in parentheses and may
/// itself hold `)` and spaces: the fields after it are counted from the last `)`.
fn running_group(stat: &str) -> Option<u32> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut fields = rest.split_ascii_whitespace();
    // After the name: state (3), ppid (4), pgrp (5).
    let state = fields.next()?;
    if matches!(state, "Z" | "X") {
        return None;
    }
    fields.nth(1)?.parse().ok()
}

/// Whether process `pid` may still be the server that started (or last restarted) a loop
/// at `since_ms` (milliseconds since the epoch, the loop's `started_at`): it runs, is not a
/// zombie, and started no later than that. A process that got the pid after the server
/// died started later; so did everything after a reboot. The boot time is given in whole
/// seconds, so a start up to 2 s after `since_ms` still counts as the owner. Fails towards
/// "may be": `true` when `/proc` cannot tell.
pub fn may_be_owner(pid: u32, since_ms: i64) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        // No such process, unless /proc itself cannot be read.
        return !std::path::Path::new("/proc/self/stat").exists();
    };
    let Some(started) = started_ms(&stat) else {
        return running_group(&stat).is_some();
    };
    running_group(&stat).is_some() && started <= since_ms.saturating_add(2000)
}

/// When the process of a `/proc/<pid>/stat` line started, in milliseconds since the epoch
/// (field 22, clock ticks after boot, plus `btime` of `/proc/stat`).
fn started_ms(stat: &str) -> Option<i64> {
    let rest = &stat[stat.rfind(')')? + 1..];
    // After the name: state is field 3, so field 22 is the 20th of the rest.
    let ticks: i64 = rest.split_ascii_whitespace().nth(19)?.parse().ok()?;
    let btime: i64 = std::fs::read_to_string("/proc/stat")
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix("btime ")?.trim().parse().ok())?;
    // SAFETY: sysconf reads a constant of the running system; it has no preconditions.
    let hz: i64 = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    (hz > 0).then(|| btime.saturating_mul(1000).saturating_add(ticks.saturating_mul(1000) / hz))
}

/// This boot's id (`/proc/sys/kernel/random/boot_id`).
fn boot_id() -> Option<String> {
    let id = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").ok()?;
    Some(id.trim().to_string()).filter(|s| !s.is_empty() && !s.contains(' '))
}

/// Kills what is left of an agent turn whose server died: the turn's process group, led by
/// `leader`, whose processes carry `FORGE_SESSION_ID=<session>` in their environment.
/// Returns how many processes were killed.
///
/// - Another boot: nothing of it runs.
/// - The group is the leader's pid. It is killed (`killpg`, one signal to every member,
///   forks in flight included) only when one of its processes, the leader or what it
///   started, names the session in its environment: while a group has members the kernel
///   does not give its id to a new process, so such a member means the group is still the
///   turn's, and a stranger that got the pid after the group was gone is left alone.
/// - Waits (at most 2 s) until no process of the group runs, so that what comes next (a
///   restart's new agent) does not meet the old one's processes.
///
/// - Then every other process that carries the session ([`kill_marked`]): what left the
///   group (`setsid`, a daemon). No live server runs the loop, so none of them is a
///   current turn's.
///
/// Not found: a process that left the group and dropped the session from its environment.
pub fn kill_orphaned(leader: &Leader, session: &str) -> usize {
    if boot_id().as_deref() != Some(leader.boot.as_str()) {
        return 0;
    }
    let want = format!("FORGE_SESSION_ID={session}");
    let members = group_members(leader.pid);
    let ours = members.iter().any(|pid| carries(*pid, &want));
    let mut killed = 0;
    if ours {
        kill_group(leader.pid);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(2);
        while !group_members(leader.pid).is_empty() && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        killed = members.len();
    }
    killed + kill_session_marked(session)
}

/// The variable that marks a `forge.shell` command with the session it ran for. Not
/// `FORGE_SESSION_ID`: a `forge-lsp call` in the command would then claim to be that
/// session (without its token).
pub const SHELL_SESSION_ENV: &str = "FORGE_SHELL_SESSION";

/// Kills what carries `session`'s marks: its agent's processes (`FORGE_SESSION_ID`) and
/// the `forge.shell` commands run for it ([`SHELL_SESSION_ENV`]: without the sandbox, which
/// dies with the server, a command outlived a server killed outright, and the next cancel
/// or restart did not find it; review YI).
pub fn kill_session_marked(session: &str) -> usize {
    kill_marked("FORGE_SESSION_ID", session) + kill_marked(SHELL_SESSION_ENV, session)
}

/// Kills every process of this user whose environment holds `var=value`, however it left
/// the process group it was started in (`setsid`, a daemon's double fork), and returns how
/// many were killed. For a marker no other process has (a plugin tool call's id, an agent
/// turn's): what a stopped call or turn started in the background does not outlive it.
/// Called only when something is stopped: a daemon a call or turn started (sccache, an
/// ssh master) carries the marker too, and may be serving others by then; and reading a
/// process's environment can wait on its memory (a process stuck on a hung network mount).
///
/// - Each process is opened as a pidfd before its environment is read, and the signal goes
///   to that pidfd: a pid reused between the read and the kill cannot be hit.
/// - Rounds repeat until two in a row, 10 ms apart, find nothing (at most 8 rounds): a
///   process that forked while its parent was being killed is found in the next, and so is
///   one that was in the middle of `execve` (its environment reads empty for that moment,
///   between the new program's memory and its stack: found by reading the code; no test
///   can stop a process there).
///
/// Not found: a process that cleared or replaced its environment, and one whose
/// `/proc/<pid>/environ` this process may not read (another user's, a setuid program).
pub fn kill_marked(var: &str, value: &str) -> usize {
    let want = format!("{var}={value}");
    let mut killed = 0;
    let mut quiet = false;
    for _ in 0..8 {
        let Ok(dir) = std::fs::read_dir("/proc") else { return killed };
        let me = std::process::id();
        let mut round = Vec::new();
        for pid in dir.flatten().filter_map(|e| e.file_name().to_str().and_then(|s| s.parse::<u32>().ok())) {
            if pid == me {
                continue;
            }
            let Some(fd) = Pidfd::open(pid) else { continue };
            if carries(pid, &want) && fd.kill() {
                round.push(fd);
            }
        }
        if round.is_empty() {
            if quiet {
                break;
            }
            quiet = true;
            std::thread::sleep(std::time::Duration::from_millis(10));
            continue;
        }
        quiet = false;
        killed += round.len();
        // Until they have exited (at most 1 s), so the next round does not count them again.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(1);
        for fd in &round {
            fd.wait_exit(deadline);
        }
    }
    killed
}

/// Whether process `pid`'s environment holds the entry `var_value` (`NAME=value`); false
/// when it cannot be read (gone, a zombie, another user's).
fn carries(pid: u32, var_value: &str) -> bool {
    let env = std::fs::read(format!("/proc/{pid}/environ")).unwrap_or_default();
    env.split(|b| *b == 0).any(|kv| kv == var_value.as_bytes())
}

/// A process opened by pid (`pidfd_open`), to signal without the pid's reuse in between.
struct Pidfd(std::os::fd::OwnedFd);

impl Pidfd {
    fn open(pid: u32) -> Option<Pidfd> {
        use std::os::fd::FromRawFd;
        let pid = libc::pid_t::try_from(pid).ok()?;
        // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor or -1.
        let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
        let fd = i32::try_from(fd).ok().filter(|fd| *fd >= 0)?;
        // SAFETY: `fd` was just returned by the kernel and is owned by nobody else.
        Some(Pidfd(unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) }))
    }

    /// Sends SIGKILL; false when the process was gone or may not be signalled.
    fn kill(&self) -> bool {
        use std::os::fd::AsRawFd;
        // SAFETY: a signal to the process this descriptor holds; no memory is passed.
        let r = unsafe {
            libc::syscall(
                libc::SYS_pidfd_send_signal,
                self.0.as_raw_fd(),
                libc::SIGKILL,
                std::ptr::null::<libc::siginfo_t>(),
                0,
            )
        };
        r == 0
    }

    /// Waits until the process has exited (a zombie or reaped), or `deadline`.
    fn wait_exit(&self, deadline: std::time::Instant) {
        use std::os::fd::AsRawFd;
        let mut p = libc::pollfd { fd: self.0.as_raw_fd(), events: libc::POLLIN, revents: 0 };
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            let ms = libc::c_int::try_from(left.as_millis()).unwrap_or(libc::c_int::MAX);
            // SAFETY: one pollfd that lives on this stack frame for the call.
            let r = unsafe { libc::poll(&mut p, 1, ms) };
            if r >= 0 || std::io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) || left.is_zero() {
                return;
            }
        }
    }
}

/// The running processes (zombies left out) whose process group is `pgid`.
fn group_members(pgid: u32) -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir("/proc") else { return vec![] };
    dir.flatten()
        .filter_map(|e| e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()))
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/stat")).ok().and_then(|s| running_group(&s)) == Some(pgid)
        })
        .collect()
}

/// The variable that marks every process of one agent turn (a new id per turn).
pub const TURN_ENV: &str = "FORGE_TURN_ID";

/// The mark of each session's running turn, in this process: what the server runs for the
/// turn itself (a `forge.shell` command, which is its own process group and no child of
/// the agent) carries it too, so that stopping the turn kills it as well.
pub(crate) static RUNNING_TURNS: std::sync::LazyLock<std::sync::Mutex<std::collections::HashMap<String, String>>> =
    std::sync::LazyLock::new(Default::default);

/// The `FORGE_TURN_ID` of `session`'s turn running in this process, if one runs.
pub fn running_turn(session: &str) -> Option<String> {
    RUNNING_TURNS.lock().unwrap_or_else(|p| p.into_inner()).get(session).cloned()
}

/// Sessions whose last turn in this process has ended (and none of theirs runs now): a
/// tool call in their name comes from a turn that is over (credentials kept by another
/// process, a call sent after the end). A session this process never ran a turn of is
/// not in it.
pub(crate) static ENDED_TURNS: std::sync::LazyLock<std::sync::Mutex<std::collections::HashSet<String>>> =
    std::sync::LazyLock::new(Default::default);

/// How many sessions [`ENDED_TURNS`] keeps; past that it starts over (a call of a session
/// forgotten so runs unmarked, as a session this process never ran a turn of).
const MAX_ENDED_TURNS: usize = 4096;

/// Records that `session`'s turn in this process ended.
pub(crate) fn note_turn_ended(session: &str) {
    let mut ended = ENDED_TURNS.lock().unwrap_or_else(|p| p.into_inner());
    if ended.len() >= MAX_ENDED_TURNS {
        ended.clear();
    }
    ended.insert(session.to_string());
}

/// Whether `session` had a turn in this process that ended, with none running now.
pub fn turn_ended_here(session: &str) -> bool {
    ENDED_TURNS.lock().unwrap_or_else(|p| p.into_inner()).contains(session)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_group_is_counted_from_the_last_parenthesis() {
        let table: &[(&str, Option<u32>)] = &[
            ("17 (sleep) S 1 4242 4242 0 -1", Some(4242)),
            // A name with a space and a `)` of its own.
            ("17 (a) b (c) S 1 4242 4242", Some(4242)),
            // A zombie has no group left to kill.
            ("17 (sleep) Z 1 4242 4242", None),
            ("17 (x", None),
            ("1 (x) S 0", None),
        ];
        for (line, want) in table {
            assert_eq!(running_group(line), *want, "{line}");
        }
    }

    #[test]
    fn a_leader_record_reads_back_and_nothing_else_does() {
        let l = Leader { pid: 31337, boot: "0b0e2d7e-6f3c-4e7e-9d8e-1c2b3a4d5e6f".into() };
        assert_eq!(Leader::parse(&l.record()), Some(l.clone()));
        for bad in ["", "1", "1 ", "x b", "-1 b", "1 b extra"] {
            assert_eq!(Leader::parse(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn another_boots_leader_is_never_looked_for() {
        let me = Leader::of(std::process::id()).expect("this boot's id");
        let other = Leader { boot: "another-boot".into(), ..me };
        assert_eq!(kill_orphaned(&other, "ses_none"), 0);
    }

    /// A group whose leader exits at once and leaves `sleep 60`s behind, the first with
    /// `env` (a session or none) and the rest without FORGE_SESSION_ID. Returns the leader
    /// and the sleeps' pids.
    fn orphaned_group(session: Option<&str>, others: usize) -> (Leader, Vec<u32>) {
        use std::io::Read;
        use std::os::unix::process::CommandExt;
        let mut script = String::from("sleep 60 >/dev/null & echo $!;");
        for _ in 0..others {
            script.push_str(" env -u FORGE_SESSION_ID sleep 60 >/dev/null & echo $!;");
        }
        let mut cmd = std::process::Command::new("sh");
        cmd.args(["-c", &script]).env_remove("FORGE_SESSION_ID").stdout(std::process::Stdio::piped()).process_group(0);
        if let Some(s) = session {
            cmd.env("FORGE_SESSION_ID", s);
        }
        let mut lead = cmd.spawn().expect("sh");
        let leader = Leader::of(lead.id()).expect("the leader");
        let mut out = String::new();
        lead.stdout.take().unwrap().read_to_string(&mut out).unwrap();
        lead.wait().unwrap();
        let pids: Vec<u32> = out.split_whitespace().map(|s| s.parse().unwrap()).collect();
        assert_eq!(pids.len(), 1 + others, "{out}");
        (leader, pids)
    }

    fn alive(pid: u32) -> bool {
        std::fs::read_to_string(format!("/proc/{pid}/stat")).ok().and_then(|s| running_group(&s)).is_some()
    }

    #[test]
    fn the_owner_check_tells_a_live_owner_from_a_dead_one_and_a_later_process() {
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as i64;
        let me = std::process::id();
        assert!(may_be_owner(me, now), "this process started before now");
        assert!(!may_be_owner(me, now - 3_600_000), "a process started after the loop is a stranger");
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        child.wait().unwrap();
        assert!(!may_be_owner(pid, now + 60_000), "a reaped process is gone");
        let stat = "12 (a) b) c) S 1 12 12 0 -1 4194560 0 0 0 0 0 0 0 0 20 0 1 0 500 0 0";
        let btime: i64 = std::fs::read_to_string("/proc/stat")
            .unwrap()
            .lines()
            .find_map(|l| l.strip_prefix("btime ")?.trim().parse().ok())
            .unwrap();
        // SAFETY: as in started_ms.
        let hz: i64 = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
        assert_eq!(
            started_ms(stat),
            Some(btime * 1000 + 500 * 1000 / hz),
            "field 22 is read after the last parenthesis"
        );
    }

    #[test]
    fn an_orphaned_group_is_killed_when_it_names_the_session_and_a_strangers_is_not() {
        // The leader is gone (reaped): the group is found by its id and a member's session;
        // the whole group goes, a member that dropped the variable too.
        let (leader, pids) = orphaned_group(Some("ses_orphan"), 1);
        assert!(pids.iter().all(|p| alive(*p)));
        assert_eq!(kill_orphaned(&leader, "ses_other"), 0, "another session's group");
        assert!(pids.iter().all(|p| alive(*p)));
        assert_eq!(kill_orphaned(&leader, "ses_orphan"), 2);
        // kill_orphaned waited for them.
        assert!(pids.iter().all(|p| !alive(*p)), "the group survived: {pids:?}");
        // A group none of whose processes names the session: a stranger's, left alone.
        let (stranger, pids) = orphaned_group(None, 1);
        assert_eq!(kill_orphaned(&stranger, "ses_orphan"), 0);
        assert!(pids.iter().all(|p| alive(*p)), "a stranger's group was killed");
        kill_group(stranger.pid);
    }

    /// Runs `sh -c script` with the variable `env` and returns the pids it echoed, once it
    /// exited (what it started in the background runs on).
    fn pids_of(script: &str, env: (&str, &str)) -> Vec<u32> {
        // Standard error not captured: the background processes would hold it open.
        let out = std::process::Command::new("sh")
            .args(["-c", script])
            .env(env.0, env.1)
            .stderr(std::process::Stdio::null())
            .output()
            .expect("sh");
        String::from_utf8_lossy(&out.stdout).split_whitespace().map(|s| s.parse().unwrap()).collect()
    }

    /// What left the dead turn's group but carries its session goes too.
    #[test]
    fn an_orphaned_turns_escaped_process_is_killed_with_its_group() {
        let (leader, pids) = orphaned_group(Some("ses_escaped"), 0);
        let escaped = pids_of("setsid sleep 60 >/dev/null 2>&1 & echo $!", ("FORGE_SESSION_ID", "ses_escaped"))[0];
        // Once it runs `sleep`: while `setsid` execs, its environment cannot be read, and a
        // CI run once scanned just then (the kill found 1 of 2).
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while std::fs::read_to_string(format!("/proc/{escaped}/comm")).map(|c| c.trim() != "sleep").unwrap_or(false)
            && std::time::Instant::now() < deadline
        {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        assert_eq!(kill_orphaned(&leader, "ses_escaped"), 2);
        assert!(!alive(pids[0]) && !alive(escaped), "survived: {pids:?}, {escaped}");
    }

    /// A `forge.shell` command run for the session, which is no child of its agent and
    /// carries no `FORGE_SESSION_ID`, goes too.
    #[test]
    fn an_orphaned_turns_shell_command_is_killed_with_it() {
        let (leader, pids) = orphaned_group(Some("ses_shell"), 0);
        let script = "env -u FORGE_SESSION_ID setsid sleep 60 >/dev/null 2>&1 & echo $!";
        let command = pids_of(script, (SHELL_SESSION_ENV, "ses_shell"))[0];
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while std::fs::read_to_string(format!("/proc/{command}/comm")).map(|c| c.trim() != "sleep").unwrap_or(false)
            && std::time::Instant::now() < deadline
        {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        assert_eq!(kill_orphaned(&leader, "ses_shell"), 2);
        assert!(!alive(pids[0]) && !alive(command), "survived: {pids:?}, {command}");
    }

    /// Processes that carry the marker are killed wherever they went (`setsid`, a
    /// subshell's background job); one without it, or with another value, is not.
    #[test]
    fn marked_processes_are_killed_whatever_group_they_left_for() {
        let mark = format!("m{}", std::process::id());
        let script = "setsid sleep 60 >/dev/null 2>&1 & echo $!; (sleep 60 >/dev/null & echo $!); \
                      env -u FORGE_TEST_MARK sleep 60 >/dev/null & echo $!; \
                      FORGE_TEST_MARK=other sleep 60 >/dev/null & echo $!";
        let pids = pids_of(script, ("FORGE_TEST_MARK", &mark));
        assert_eq!(pids.len(), 4, "{pids:?}");
        // Each has become `sleep` (before its exec, `env -u` still carries the marker).
        let slept = |p: &u32| std::fs::read(format!("/proc/{p}/cmdline")).is_ok_and(|c| c.starts_with(b"sleep\0"));
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while !pids.iter().all(slept) && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        assert!(pids.iter().all(|p| alive(*p)));
        assert_eq!(kill_marked("FORGE_TEST_MARK", &mark), 2);
        assert!(!alive(pids[0]) && !alive(pids[1]), "a marked process survived: {pids:?}");
        assert!(alive(pids[2]) && alive(pids[3]), "an unmarked process was killed: {pids:?}");
        assert_eq!(kill_marked("FORGE_TEST_MARK", &mark), 0, "nothing is left to kill");
        for p in &pids[2..] {
            // SAFETY: a signal to the test's own leftover sleep.
            unsafe { libc::kill(*p as i32, libc::SIGKILL) };
        }
    }
}
