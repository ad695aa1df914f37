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

/// Which process led an agent turn's process group, told apart from a later process that
/// gets the same pid: the pid, its start time (clock ticks after boot, `/proc/<pid>/stat`)
/// and the boot it ran in. Recorded in the store while the turn runs
/// (`loop_sessions.agent_process`), so that a restart or cancel after the server that ran
/// the turn died can end what the turn left running (`kill_orphaned`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Leader {
    pub pid: u32,
    pub start: u64,
    pub boot: String,
}

impl Leader {
    /// The leader `pid` as the system shows it now; `None` when it is gone or `/proc` cannot
    /// be read.
    pub fn of(pid: u32) -> Option<Leader> {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        let (_, start) = stat_fields(&stat)?;
        Some(Leader { pid, start, boot: boot_id()? })
    }

    /// The stored form: `<pid> <start> <boot id>`.
    pub fn record(&self) -> String {
        format!("{} {} {}", self.pid, self.start, self.boot)
    }

    /// Reads [`Leader::record`]'s form back; `None` for anything else.
    pub fn parse(s: &str) -> Option<Leader> {
        let mut it = s.split(' ');
        let pid = it.next()?.parse().ok()?;
        let start = it.next()?.parse().ok()?;
        let boot = it.next()?.to_string();
        (it.next().is_none() && !boot.is_empty()).then_some(Leader { pid, start, boot })
    }
}

/// The process group (field 5) and start time (field 22) of a `/proc/<pid>/stat` line. The
/// command name (field 2) is in parentheses and may itself hold `)` and spaces: the fields
/// after it are counted from the last `)`.
fn stat_fields(stat: &str) -> Option<(u32, u64)> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_ascii_whitespace().collect();
    // After the name: state (3), ppid (4), pgrp (5), ... starttime (22).
    Some((fields.get(2)?.parse().ok()?, fields.get(19)?.parse().ok()?))
}

/// This boot's id (`/proc/sys/kernel/random/boot_id`).
fn boot_id() -> Option<String> {
    let id = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").ok()?;
    Some(id.trim().to_string()).filter(|s| !s.is_empty() && !s.contains(' '))
}

/// Kills what is left of an agent turn whose server died: the turn's process group, led by
/// `leader`, whose processes carry `FORGE_SESSION_ID=<session>` in their environment.
/// Returns how many processes (or, for a live leader, groups) were signalled.
///
/// - Another boot: nothing of it runs.
/// - The leader still runs (same pid, same start time): its whole group is killed.
/// - Otherwise the leader is gone (the server's death killed it, `PR_SET_PDEATHSIG`), or its
///   pid now names another process. The processes whose group is still the leader's pid
///   and whose environment names the session are killed one by one: while a group has
///   members the kernel does not give its id to a new process, and the environment check
///   leaves alone the group of a stranger that got the pid after the group was gone.
///   A process that cleared its environment, or left the group (`setsid`), is not found.
pub fn kill_orphaned(leader: &Leader, session: &str) -> usize {
    if boot_id().as_deref() != Some(leader.boot.as_str()) {
        return 0;
    }
    if Leader::of(leader.pid).is_some_and(|now| now.start == leader.start) {
        kill_group(leader.pid);
        return 1;
    }
    let want = format!("FORGE_SESSION_ID={session}");
    let Ok(dir) = std::fs::read_dir("/proc") else { return 0 };
    let mut killed = 0;
    for e in dir.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else { continue };
        let in_group = std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .ok()
            .and_then(|s| stat_fields(&s))
            .is_some_and(|(pgrp, _)| pgrp == leader.pid);
        if !in_group {
            continue;
        }
        let env = std::fs::read(format!("/proc/{pid}/environ")).unwrap_or_default();
        if !env.split(|b| *b == 0).any(|kv| kv == want.as_bytes()) {
            continue;
        }
        let Ok(p) = libc::pid_t::try_from(pid) else { continue };
        // SAFETY: kill only sends a signal.
        if p > 1 && unsafe { libc::kill(p, libc::SIGKILL) } == 0 {
            killed += 1;
        }
    }
    killed
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_fields_count_from_the_last_parenthesis() {
        let tail = "S 1 4242 4242 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 1000 200";
        let table: &[(&str, Option<(u32, u64)>)] = &[
            ("17 (sleep) ", Some((4242, 987654))),
            // A name with a space and a `)` of its own.
            ("17 (a) b (c) ", Some((4242, 987654))),
            ("17 (x", None),
        ];
        for (head, want) in table {
            let line = format!("{head}{tail}");
            let line = if want.is_none() { head.to_string() } else { line };
            assert_eq!(stat_fields(&line), *want, "{line}");
        }
        assert_eq!(stat_fields("1 (x) S 0 0"), None, "too few fields");
    }

    #[test]
    fn a_leader_record_reads_back_and_nothing_else_does() {
        let l = Leader { pid: 31337, start: 123456789, boot: "0b0e2d7e-6f3c-4e7e-9d8e-1c2b3a4d5e6f".into() };
        assert_eq!(Leader::parse(&l.record()), Some(l.clone()));
        for bad in ["", "1 2", "1 2 ", "x 2 b", "1 y b", "1 2 b extra", "-1 2 b"] {
            assert_eq!(Leader::parse(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn this_process_is_its_own_leader_record() {
        let me = Leader::of(std::process::id()).expect("this process in /proc");
        assert_eq!(Leader::of(std::process::id()), Some(me.clone()), "the start time is stable");
        assert_ne!(me.start, 0);
        // Another boot's leader is never looked for.
        let other = Leader { boot: "another-boot".into(), ..me };
        assert_eq!(kill_orphaned(&other, "ses_none"), 0);
    }

    #[test]
    fn an_orphaned_group_is_killed_by_its_session_and_a_strangers_is_not() {
        use std::os::unix::process::CommandExt;
        // A group whose leader exits at once and leaves two sleeps: one carries the session,
        // one does not (a stranger that joined the group, as far as the check can tell).
        let mut lead = std::process::Command::new("sh")
            .args(["-c", "sleep 60 >/dev/null & echo $!; env -u FORGE_SESSION_ID sleep 60 >/dev/null & echo $!"])
            .env("FORGE_SESSION_ID", "ses_orphan")
            .stdout(std::process::Stdio::piped())
            .process_group(0)
            .spawn()
            .expect("sh");
        let leader = Leader::of(lead.id()).expect("the leader");
        let out = {
            use std::io::Read;
            let mut s = String::new();
            lead.stdout.take().unwrap().read_to_string(&mut s).ok();
            s
        };
        lead.wait().unwrap();
        let pids: Vec<u32> = out.split_whitespace().map(|s| s.parse().unwrap()).collect();
        assert_eq!(pids.len(), 2, "{out}");
        let alive = |p: u32| {
            std::fs::read_to_string(format!("/proc/{p}/stat")).is_ok_and(|s| {
                !matches!(s.rsplit(')').next().unwrap_or("").trim_start().chars().next(), Some('Z' | 'X'))
            })
        };
        assert!(alive(pids[0]) && alive(pids[1]));
        // The leader is gone (reaped): its members are found by group and session.
        assert_eq!(kill_orphaned(&leader, "ses_other"), 0, "another session's group");
        assert_eq!(kill_orphaned(&leader, "ses_orphan"), 1);
        let gone = (0..100).any(|_| {
            std::thread::sleep(std::time::Duration::from_millis(20));
            !alive(pids[0])
        });
        assert!(gone, "the session's sleep {} survived", pids[0]);
        assert!(alive(pids[1]), "the sleep without the session was killed");
        kill_group(leader.pid);
    }
}
