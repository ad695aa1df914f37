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

/// This boot's id (`/proc/sys/kernel/random/boot_id`).
fn boot_id() -> Option<String> {
    let id = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").ok()?;
    Some(id.trim().to_string()).filter(|s| !s.is_empty() && !s.contains(' '))
}

/// Kills what is left of an agent turn whose server died: the turn's process group, led by
/// `leader`, whose processes carry `FORGE_SESSION_ID=<session>` in their environment.
/// Returns how many of the group's processes were found (0: nothing was killed).
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
/// Not found: a process that left the group (`setsid`); a group none of whose processes
/// kept the session in its environment.
pub fn kill_orphaned(leader: &Leader, session: &str) -> usize {
    if boot_id().as_deref() != Some(leader.boot.as_str()) {
        return 0;
    }
    let want = format!("FORGE_SESSION_ID={session}");
    let members = group_members(leader.pid);
    let ours = members.iter().any(|pid| {
        let env = std::fs::read(format!("/proc/{pid}/environ")).unwrap_or_default();
        env.split(|b| *b == 0).any(|kv| kv == want.as_bytes())
    });
    if !ours {
        return 0;
    }
    kill_group(leader.pid);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(2);
    while !group_members(leader.pid).is_empty() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    members.len()
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
}
