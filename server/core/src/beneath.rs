//! Writing files beneath a directory without ever following a symbolic link: each
//! component below the base is opened relative to its parent with `O_NOFOLLOW`
//! (an `openat` walk), so a repository that commits `.forge` or `.forge/view` as a link
//! cannot redirect the server's writes outside it. A link anywhere on the way is
//! refused with an error naming it.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path};

fn cstr(name: &std::ffi::OsStr) -> io::Result<CString> {
    CString::new(name.as_bytes()).map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "a path holds a NUL byte"))
}

fn open_dir_at(parent: &OwnedFd, name: &std::ffi::OsStr, create: bool, shown: &Path) -> io::Result<OwnedFd> {
    let c = cstr(name)?;
    let flags = libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC;
    for attempt in 0..2 {
        // SAFETY: a valid directory fd and a NUL-terminated name.
        let fd = unsafe { libc::openat(parent.as_raw_fd(), c.as_ptr(), flags) };
        if fd >= 0 {
            // SAFETY: `fd` was just opened and is owned by nobody else.
            return Ok(unsafe { OwnedFd::from_raw_fd(fd) });
        }
        let e = io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::ENOENT) if create && attempt == 0 => {
                // SAFETY: as above.
                let r = unsafe { libc::mkdirat(parent.as_raw_fd(), c.as_ptr(), 0o755) };
                if r != 0 {
                    let e = io::Error::last_os_error();
                    if e.kind() != io::ErrorKind::AlreadyExists {
                        return Err(e);
                    }
                }
            }
            Some(libc::ELOOP) | Some(libc::ENOTDIR) => {
                return Err(io::Error::other(format!(
                    "{} is a symbolic link or not a directory; refusing to write through it",
                    shown.display()
                )))
            }
            _ => return Err(e),
        }
    }
    Err(io::Error::other(format!("cannot open {}", shown.display())))
}

/// Opens the directory `base/rel` (creating missing components when `create`), never
/// following a link below `base`. `base` itself is the caller's to trust.
pub fn open_dir(base: &Path, rel: &Path, create: bool) -> io::Result<OwnedFd> {
    let c = cstr(base.as_os_str())?;
    // SAFETY: a NUL-terminated path.
    let fd = unsafe { libc::open(c.as_ptr(), libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: just opened, owned here.
    let mut dir = unsafe { OwnedFd::from_raw_fd(fd) };
    let mut shown = base.to_path_buf();
    for comp in rel.components() {
        let Component::Normal(name) = comp else {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{} is not a plain relative path", rel.display()),
            ));
        };
        shown.push(name);
        dir = open_dir_at(&dir, name, create, &shown)?;
    }
    Ok(dir)
}

/// Writes `base/rel` atomically (a fresh temporary file renamed over it) with `mode`,
/// never following a link below `base`. A link at the file's own name is replaced, not
/// written through.
pub fn write_file(base: &Path, rel: &Path, contents: &[u8], mode: u32) -> io::Result<()> {
    use std::io::Write;
    let (Some(parent), Some(name)) = (rel.parent(), rel.file_name()) else {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, format!("{} names no file", rel.display())));
    };
    let dir = open_dir(base, parent, true)?;
    // A name of its own per write: two writers of the same file (two connections) never
    // share, unlink or rename each other's temporary file.
    let mut tmp_name = std::ffi::OsString::from(".");
    tmp_name.push(name);
    tmp_name.push(format!(".{}.tmp", ulid::Ulid::new()));
    let (tmp, target) = (cstr(&tmp_name)?, cstr(name)?);
    let flags = libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW | libc::O_CLOEXEC;
    // SAFETY: as above; the mode is passed as the variadic argument openat expects.
    let fd = unsafe { libc::openat(dir.as_raw_fd(), tmp.as_ptr(), flags, 0o600 as libc::c_uint) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: just opened, owned here.
    let mut f = std::fs::File::from(unsafe { OwnedFd::from_raw_fd(fd) });
    let written = f.write_all(contents).and_then(|_| {
        use std::os::unix::fs::PermissionsExt;
        f.set_permissions(std::fs::Permissions::from_mode(mode))
    });
    drop(f);
    if let Err(e) = written {
        // SAFETY: as above.
        unsafe { libc::unlinkat(dir.as_raw_fd(), tmp.as_ptr(), 0) };
        return Err(e);
    }
    // SAFETY: as above.
    if unsafe { libc::renameat(dir.as_raw_fd(), tmp.as_ptr(), dir.as_raw_fd(), target.as_ptr()) } != 0 {
        let e = io::Error::last_os_error();
        // SAFETY: as above.
        unsafe { libc::unlinkat(dir.as_raw_fd(), tmp.as_ptr(), 0) };
        return Err(e);
    }
    Ok(())
}

/// Removes the file `base/rel` (absent is fine), never following a link below `base`.
pub fn remove_file(base: &Path, rel: &Path) -> io::Result<()> {
    let (Some(parent), Some(name)) = (rel.parent(), rel.file_name()) else {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, format!("{} names no file", rel.display())));
    };
    let dir = match open_dir(base, parent, false) {
        Ok(d) => d,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    };
    let c = cstr(name)?;
    // SAFETY: valid fd and NUL-terminated name.
    if unsafe { libc::unlinkat(dir.as_raw_fd(), c.as_ptr(), 0) } != 0 {
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::NotFound {
            return Err(e);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_and_refuses_links_on_the_way() {
        let d = tempfile::tempdir().unwrap();
        let base = d.path().join("root");
        let outside = d.path().join("outside");
        std::fs::create_dir_all(&base).unwrap();
        std::fs::create_dir_all(&outside).unwrap();
        write_file(&base, Path::new(".forge/view/index.md"), b"x", 0o444).unwrap();
        assert_eq!(std::fs::read(base.join(".forge/view/index.md")).unwrap(), b"x");
        remove_file(&base, Path::new(".forge/view/index.md")).unwrap();
        remove_file(&base, Path::new(".forge/view/index.md")).unwrap();

        for link in [".forge", ".forge/view", ".forge/view/plan"] {
            std::fs::remove_dir_all(base.join(".forge")).ok();
            std::fs::create_dir_all(base.join(link).parent().unwrap()).unwrap();
            std::os::unix::fs::symlink(&outside, base.join(link)).unwrap();
            let e = write_file(&base, Path::new(".forge/view/plan/a.md"), b"x", 0o444).unwrap_err();
            assert!(e.to_string().contains("symbolic link"), "{link}: {e}");
            assert!(std::fs::read_dir(&outside).unwrap().next().is_none(), "{link}: wrote outside");
        }
        assert!(write_file(&base, Path::new("../x"), b"x", 0o444).is_err());
    }

    #[test]
    fn concurrent_writers_of_one_file_each_leave_a_whole_version_and_no_temporary() {
        let d = tempfile::tempdir().unwrap();
        let base = d.path().to_path_buf();
        let versions: Vec<Vec<u8>> = (0..4u8).map(|k| vec![b'a' + k; 256 * 1024]).collect();
        std::thread::scope(|s| {
            for v in &versions {
                let base = &base;
                s.spawn(move || {
                    for _ in 0..20 {
                        write_file(base, Path::new("v/doc.md"), v, 0o444).unwrap();
                    }
                });
            }
        });
        let got = std::fs::read(base.join("v/doc.md")).unwrap();
        assert!(versions.contains(&got), "a mix of versions ({} bytes)", got.len());
        let names: Vec<_> = std::fs::read_dir(base.join("v")).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(names, [std::ffi::OsString::from("doc.md")], "temporaries left");
    }
}
