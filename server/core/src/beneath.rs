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

/// Directories on the way are opened as `O_PATH` handles: enough for the `*at` calls,
/// and needing only search permission, as a lookup by path does (a directory the user may
/// pass through but not list, 0711, stays usable). With `O_NOFOLLOW | O_DIRECTORY` a link
/// is refused (`ENOTDIR`), never opened.
const DIR_FLAGS: libc::c_int = libc::O_PATH | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC;

fn open_dir_at(parent: &OwnedFd, name: &std::ffi::OsStr, create: bool, shown: &Path) -> io::Result<OwnedFd> {
    open_or_make_dir_at(parent, name, create, shown).map(|(d, _)| d)
}

/// [`open_dir_at`], and whether it made the directory.
fn open_or_make_dir_at(
    parent: &OwnedFd,
    name: &std::ffi::OsStr,
    create: bool,
    shown: &Path,
) -> io::Result<(OwnedFd, bool)> {
    let c = cstr(name)?;
    let mut made = false;
    let flags = DIR_FLAGS;
    for attempt in 0..2 {
        // SAFETY: a valid directory fd and a NUL-terminated name.
        let fd = unsafe { libc::openat(parent.as_raw_fd(), c.as_ptr(), flags) };
        if fd >= 0 {
            // SAFETY: `fd` was just opened and is owned by nobody else.
            return Ok((unsafe { OwnedFd::from_raw_fd(fd) }, made));
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
                } else {
                    made = true;
                }
            }
            Some(libc::ELOOP) | Some(libc::ENOTDIR) => {
                return Err(io::Error::other(format!(
                    "{} is a symbolic link or not a directory; refusing to follow it",
                    shown.display()
                )))
            }
            _ => return Err(e),
        }
    }
    Err(io::Error::other(format!("cannot open {}", shown.display())))
}

/// `rel`'s directory and file name, or an error saying it names no file.
fn split_file(rel: &Path) -> io::Result<(&Path, &std::ffi::OsStr)> {
    match (rel.parent(), rel.file_name()) {
        (Some(parent), Some(name)) => Ok((parent, name)),
        _ => Err(io::Error::new(io::ErrorKind::InvalidInput, format!("{} names no file", rel.display()))),
    }
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

/// The mode a staged file gets.
#[derive(Clone, Copy, Debug)]
pub enum Mode {
    /// Exactly this mode.
    Exact(u32),
    /// The mode of the regular file it replaces (not of what a link there points at);
    /// for a new file, this mode under the process's umask, as for any new file.
    KeepOr(u32),
    /// Exactly this mode, and the writer's file whatever the file it replaces was: for a
    /// private file whose owner says who wrote it (another user's file replaced by root
    /// must not stay that user's to rewrite).
    Mine(u32),
}

/// One file's new content, written to a temporary file of its own beside the target in a
/// directory opened beneath a base without following links, and not yet renamed into
/// place: the first step of an all-or-nothing write of one or more files.
///
/// Invariant: the temporary exists until [`Staged::commit`] renames it or the value is
/// dropped, which removes it. The rename is relative to the directory opened when the file
/// was staged, so a directory swapped for a link in the meantime does not redirect it.
pub struct Staged {
    dir: std::sync::Arc<OwnedFd>,
    tmp: CString,
    name: CString,
    shown: std::path::PathBuf,
    pending: bool,
}

impl Staged {
    /// `base/rel`, as the caller named it (for messages).
    pub fn target(&self) -> &Path {
        &self.shown
    }

    /// Renames the temporary onto the target (a link at the target's name is replaced,
    /// not written through). On failure the temporary is removed.
    pub fn commit(mut self) -> io::Result<()> {
        // SAFETY: a valid directory fd and NUL-terminated names.
        let r = unsafe {
            libc::renameat(self.dir.as_raw_fd(), self.tmp.as_ptr(), self.dir.as_raw_fd(), self.name.as_ptr())
        };
        if r != 0 {
            return Err(io::Error::last_os_error());
        }
        self.pending = false;
        Ok(())
    }
}

impl Drop for Staged {
    fn drop(&mut self) {
        if self.pending {
            // SAFETY: as above.
            unsafe { libc::unlinkat(self.dir.as_raw_fd(), self.tmp.as_ptr(), 0) };
        }
    }
}

/// Stages `contents` for `base/rel` (see [`Staged`]), creating missing directories when
/// `create_dirs`, never following a link below `base`. The temporary is created with
/// `O_EXCL | O_NOFOLLOW` under a random name, so nothing already there (a file, a planted
/// link) is opened, and it gets its mode on the open file. `sync` flushes it to disk
/// before it is renamed. Nothing is left behind on failure.
pub fn stage(
    base: &Path,
    rel: &Path,
    contents: &[u8],
    mode: Mode,
    create_dirs: bool,
    sync: bool,
) -> io::Result<Staged> {
    Stager::new(base).stage(rel, contents, mode, create_dirs, sync)
}

/// Stages files and sets files aside beneath one base, opening each directory once: the
/// files of one directory share its descriptor, so a change of thousands of files holds
/// one descriptor per directory, not one per file.
///
/// Invariant: the directories it made for staged files are removed again when it is
/// dropped (each if it is empty: drop the staged files first), unless
/// [`Stager::keep_made_dirs`] was called once the change was committed. A refused change
/// leaves no empty directories behind.
pub struct Stager {
    dirs: Dirs,
}

impl Drop for Stager {
    fn drop(&mut self) {
        for (parent, name) in self.dirs.made.drain(..).rev() {
            // SAFETY: a directory descriptor we hold and a NUL-terminated name. Removes
            // only an empty directory, never follows a link (one swapped in is ENOTDIR).
            unsafe { libc::unlinkat(parent.as_raw_fd(), name.as_ptr(), libc::AT_REMOVEDIR) };
        }
    }
}

/// The directories opened beneath one base, each from its parent's descriptor without
/// following a link ([`open_dir_at`]), kept for the next files (a staged file holds its
/// own directory's descriptor until it is committed).
///
/// Invariant: at most [`Dirs::KEPT`] are kept. When full, all but the nearest
/// [`Dirs::ANCESTORS`] ancestors of the directory being opened are let go, so a
/// depth-first walk keeps the chain it climbs back through, and many searches at once
/// hold a few descriptors each.
struct Dirs {
    base: std::path::PathBuf,
    kept: std::collections::HashMap<std::path::PathBuf, std::sync::Arc<OwnedFd>>,
    /// The directories made, in order: (parent, name).
    made: Vec<(std::sync::Arc<OwnedFd>, CString)>,
}

impl Dirs {
    const KEPT: usize = 12;
    const ANCESTORS: usize = 8;

    fn new(base: &Path) -> Dirs {
        Dirs { base: base.to_path_buf(), kept: Default::default(), made: vec![] }
    }

    /// The directory `rel` beneath the base (its missing components made when `create`).
    fn get(&mut self, rel: &Path, create: bool) -> io::Result<std::sync::Arc<OwnedFd>> {
        if let Some(d) = self.kept.get(rel) {
            return Ok(d.clone());
        }
        let d = match (rel.parent(), rel.file_name()) {
            (Some(parent), Some(name)) => {
                let parent = self.get(parent, create)?;
                let (d, made) = open_or_make_dir_at(&parent, name, create, &self.base.join(rel))?;
                if made {
                    self.made.push((parent, cstr(name)?));
                }
                d
            }
            _ => open_dir(&self.base, rel, create)?,
        };
        if self.kept.len() >= Self::KEPT {
            let depth = rel.components().count();
            self.kept.retain(|k, _| rel.starts_with(k) && k.components().count() + Self::ANCESTORS >= depth);
        }
        let d = std::sync::Arc::new(d);
        self.kept.insert(rel.to_path_buf(), d.clone());
        Ok(d)
    }
}

impl Stager {
    pub fn new(base: &Path) -> Stager {
        Stager { dirs: Dirs::new(base) }
    }

    /// Keeps the directories made for the staged files (the change was committed).
    pub fn keep_made_dirs(&mut self) {
        self.dirs.made.clear();
    }

    fn dir(&mut self, rel: &Path, create: bool) -> io::Result<std::sync::Arc<OwnedFd>> {
        self.dirs.get(rel, create)
    }

    /// [`stage`] with this stager's base and directories.
    pub fn stage(
        &mut self,
        rel: &Path,
        contents: &[u8],
        mode: Mode,
        create_dirs: bool,
        sync: bool,
    ) -> io::Result<Staged> {
        let (parent, name) = split_file(rel)?;
        let dir = self.dir(parent, create_dirs)?;
        stage_at(dir, self.dirs.base.join(rel), name, contents, mode, sync)
    }

    /// [`set_aside`] with this stager's base and directories.
    pub fn set_aside(&mut self, rel: &Path) -> io::Result<Option<SetAside>> {
        let (parent, name) = split_file(rel)?;
        let dir = match self.dir(parent, false) {
            Ok(d) => d,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e),
        };
        set_aside_in(dir, name)
    }
}

/// Stages `contents` for the file `name` in the directory `dir` (already opened without
/// following a link, as [`open_subdir`] does), as [`stage`] does for a path: for a caller
/// that checked the directory through its descriptor and must write into that one.
/// `shown` names the target in messages.
pub fn stage_at(
    dir: std::sync::Arc<OwnedFd>,
    shown: std::path::PathBuf,
    name: &std::ffi::OsStr,
    contents: &[u8],
    mode: Mode,
    sync: bool,
) -> io::Result<Staged> {
    use std::io::Write;
    use std::os::unix::fs::PermissionsExt;
    let name_c = cstr(name)?;
    // (mode set on the open file, mode the file is created with: a new file's is
    // subject to the umask).
    // The file replaced keeps its owner too, where the process may give it (root, or a
    // group the user is in): a rewrite by root must not leave a user's file root's.
    let existing = existing_file(&dir, &name_c)?;
    let (fchmod, create) = match mode {
        Mode::Exact(m) | Mode::Mine(m) => (Some(m), 0o600),
        Mode::KeepOr(new) => match existing {
            Some((m, _, _)) => (Some(m), 0o600),
            None => (None, new),
        },
    };
    // A name of its own per write: two writers of the same file (two connections) never
    // share, unlink or rename each other's temporary file. Its length does not depend on
    // the target's, so a file whose name is near the system's limit can still be written.
    let tmp = cstr(std::ffi::OsStr::new(&format!(".forge-{}.tmp", ulid::Ulid::new())))?;
    let flags = libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW | libc::O_CLOEXEC;
    // SAFETY: as above; the mode is passed as the variadic argument openat expects.
    let fd = unsafe { libc::openat(dir.as_raw_fd(), tmp.as_ptr(), flags, create as libc::c_uint) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    let staged = Staged { dir, tmp, name: name_c, shown, pending: true };
    // SAFETY: just opened, owned here.
    let mut f = std::fs::File::from(unsafe { OwnedFd::from_raw_fd(fd) });
    f.write_all(contents)?;
    if let (Some((_, uid, gid)), false) = (existing, matches!(mode, Mode::Mine(_))) {
        keep_owner(&f, uid, gid);
    }
    // After the owner: a change of owner clears set-id bits.
    if let Some(m) = fchmod {
        f.set_permissions(std::fs::Permissions::from_mode(m))?;
    }
    if sync {
        f.sync_all()?;
    }
    Ok(staged)
}

/// Gives the new file `f` the owner and group of the file it replaces, as far as the
/// process may: both (root), else the group alone (a group the user is in), else neither
/// (the file is the writer's, as any new file).
fn keep_owner(f: &std::fs::File, uid: u32, gid: u32) {
    use std::os::unix::fs::MetadataExt;
    // What the new file got (a set-group-id directory gives its own group).
    let Ok(now) = f.metadata() else { return };
    if (now.uid(), now.gid()) == (uid, gid) {
        return;
    }
    // SAFETY: plain syscalls on a descriptor owned by `f`.
    if unsafe { libc::fchown(f.as_raw_fd(), uid, gid) } != 0 && now.gid() != gid {
        let _ = unsafe { libc::fchown(f.as_raw_fd(), u32::MAX, gid) };
    }
}

/// The permission bits, owner and group of the regular file `name` in `dir` (not
/// following a link), or `None` when there is none.
fn existing_file(dir: &OwnedFd, name: &CString) -> io::Result<Option<(u32, u32, u32)>> {
    // SAFETY: a zeroed stat is a valid out-parameter; valid fd and name.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    let r = unsafe { libc::fstatat(dir.as_raw_fd(), name.as_ptr(), &mut st, libc::AT_SYMLINK_NOFOLLOW) };
    if r != 0 {
        let e = io::Error::last_os_error();
        return if e.kind() == io::ErrorKind::NotFound { Ok(None) } else { Err(e) };
    }
    Ok((st.st_mode & libc::S_IFMT == libc::S_IFREG).then_some((st.st_mode & 0o7777, st.st_uid, st.st_gid)))
}

/// Commits staged files in order. On a failure the files not yet renamed are removed and
/// the error carries the index of the one that failed; the files before it already have
/// their new content.
pub fn commit_all(staged: Vec<Staged>) -> Result<(), (usize, io::Error)> {
    for (i, s) in staged.into_iter().enumerate() {
        s.commit().map_err(|e| (i, e))?;
    }
    Ok(())
}

/// Makes the directory `base/rel` with mode 0700 (the umask may only take bits away)
/// unless it exists, creating missing parents as [`open_dir`] does and never following a
/// link below `base`. An existing directory of this user's that others may enter (made
/// by an older version, or by hand) is narrowed to 0700; a link there, or a directory of
/// another user's, is left as it is (a write beneath it refuses the link).
pub fn make_private_dir(base: &Path, rel: &Path) -> io::Result<()> {
    let (parent, name) = split_file(rel)?;
    let dir = open_dir(base, parent, true)?;
    let c = cstr(name)?;
    // SAFETY: a valid directory fd and a NUL-terminated name.
    if unsafe { libc::mkdirat(dir.as_raw_fd(), c.as_ptr(), 0o700) } == 0 {
        return Ok(());
    }
    let e = io::Error::last_os_error();
    if e.kind() != io::ErrorKind::AlreadyExists {
        return Err(e);
    }
    // Opened as itself (not `O_PATH`: fchmod needs a real descriptor), never through a link.
    let flags = libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC;
    // SAFETY: a valid directory fd and a NUL-terminated name.
    let fd = unsafe { libc::openat(dir.as_raw_fd(), c.as_ptr(), flags) };
    if fd < 0 {
        return Ok(());
    }
    // SAFETY: just opened, owned here.
    let own = unsafe { OwnedFd::from_raw_fd(fd) };
    let st = stat_fd(&own)?;
    // SAFETY: geteuid cannot fail.
    if st.st_uid == unsafe { libc::geteuid() } && st.st_mode & 0o077 != 0 {
        // Best effort: a file system without Unix modes (vfat, exFAT) refuses it, and the
        // folder is as private there as that file system makes anything (a review: an
        // error here would have failed every write beneath it).
        // SAFETY: a valid fd.
        let _ = unsafe { libc::fchmod(own.as_raw_fd(), 0o700) };
    }
    Ok(())
}

/// Writes `base/rel` atomically (a fresh temporary file renamed over it) with `mode`,
/// creating missing directories and never following a link below `base`. A link at the
/// file's own name is replaced, not written through.
pub fn write_file(base: &Path, rel: &Path, contents: &[u8], mode: u32) -> io::Result<()> {
    stage(base, rel, contents, Mode::Exact(mode), true, false)?.commit()
}

/// A file moved aside under a temporary name in its directory (opened beneath a base
/// without following links): the removal step of an all-or-nothing change of several
/// files, taken before any new content is renamed into place, so that a file that cannot
/// be removed (a directory without write permission) fails the change before it starts.
///
/// Invariant: until [`SetAside::finish`] unlinks it, the file exists under its temporary
/// name, and dropping the value renames it back.
pub struct SetAside {
    dir: std::sync::Arc<OwnedFd>,
    name: CString,
    aside: CString,
    pending: bool,
}

impl SetAside {
    /// Removes the file for good (a failure leaves the temporary behind and is returned).
    pub fn finish(mut self) -> io::Result<()> {
        self.pending = false;
        // SAFETY: a valid directory fd and a NUL-terminated name.
        if unsafe { libc::unlinkat(self.dir.as_raw_fd(), self.aside.as_ptr(), 0) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }
}

impl Drop for SetAside {
    fn drop(&mut self) {
        if self.pending {
            // SAFETY: as above. `renameat` would replace a file written at the name since;
            // nothing is written there while the value lives (the caller's change failed).
            unsafe {
                libc::renameat(self.dir.as_raw_fd(), self.aside.as_ptr(), self.dir.as_raw_fd(), self.name.as_ptr())
            };
        }
    }
}

/// Moves the file `base/rel` aside (see [`SetAside`]), never following a link below
/// `base`; `None` when there is no such file.
pub fn set_aside(base: &Path, rel: &Path) -> io::Result<Option<SetAside>> {
    Stager::new(base).set_aside(rel)
}

fn set_aside_in(dir: std::sync::Arc<OwnedFd>, name: &std::ffi::OsStr) -> io::Result<Option<SetAside>> {
    // (As for a staged file, a name whose length does not depend on the file's.)
    let (name, aside) = (cstr(name)?, cstr(std::ffi::OsStr::new(&format!(".forge-{}.removed", ulid::Ulid::new())))?);
    // SAFETY: as above.
    if unsafe { libc::renameat(dir.as_raw_fd(), name.as_ptr(), dir.as_raw_fd(), aside.as_ptr()) } != 0 {
        let e = io::Error::last_os_error();
        return if e.kind() == io::ErrorKind::NotFound { Ok(None) } else { Err(e) };
    }
    Ok(Some(SetAside { dir, name, aside, pending: true }))
}

/// Removes the file `base/rel` (absent is fine), never following a link below `base`.
pub fn remove_file(base: &Path, rel: &Path) -> io::Result<()> {
    let (parent, name) = split_file(rel)?;
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

/// The contents of the regular file `base/rel`, never following a link below `base` (a
/// directory or the file swapped for a link after a check is refused, not read through).
pub fn read_file(base: &Path, rel: &Path) -> io::Result<Vec<u8>> {
    use std::io::Read;
    let mut bytes = Vec::new();
    open_file(base, rel)?.read_to_end(&mut bytes)?;
    Ok(bytes)
}

/// The regular file `base/rel` opened for reading, as [`read_file`] opens it.
pub fn open_file(base: &Path, rel: &Path) -> io::Result<std::fs::File> {
    let (parent, name) = split_file(rel)?;
    let dir = open_dir(base, parent, false)?;
    open_file_at(&dir, name, rel)
}

/// Opens many files beneath one base for reading, as [`open_file`] does, keeping the
/// directories it opened ([`Dirs`]) for the next files: a search that reads every file of
/// a tree opens each directory about once instead of once per file.
pub struct Reader {
    dirs: Dirs,
}

impl Reader {
    pub fn new(base: &Path) -> Reader {
        Reader { dirs: Dirs::new(base) }
    }

    /// The regular file `rel` (below the base) opened for reading.
    pub fn open(&mut self, rel: &Path) -> io::Result<std::fs::File> {
        let (parent, name) = split_file(rel)?;
        let dir = self.dirs.get(parent, false)?;
        open_file_at(&dir, name, rel)
    }
}

fn open_file_at(dir: &OwnedFd, name: &std::ffi::OsStr, rel: &Path) -> io::Result<std::fs::File> {
    let c = cstr(name)?;
    // Non-blocking: a FIFO planted at the name must not hang the open.
    let flags = libc::O_RDONLY | libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NONBLOCK;
    // SAFETY: a valid directory fd and a NUL-terminated name.
    let fd = unsafe { libc::openat(dir.as_raw_fd(), c.as_ptr(), flags) };
    if fd < 0 {
        let e = io::Error::last_os_error();
        return Err(if e.raw_os_error() == Some(libc::ELOOP) {
            io::Error::other(format!("{} is a symbolic link; refusing to read through it", rel.display()))
        } else {
            e
        });
    }
    // SAFETY: just opened, owned here.
    let file = std::fs::File::from(unsafe { OwnedFd::from_raw_fd(fd) });
    if !file.metadata()?.is_file() {
        return Err(io::Error::other(format!("{} is not a regular file", rel.display())));
    }
    // A regular file: blocking reads again (a file system that honours the flag, FUSE, a
    // file under a lease, would otherwise fail a read with "would block").
    // SAFETY: a valid fd; F_GETFL/F_SETFL take and give plain flags.
    unsafe {
        let fl = libc::fcntl(file.as_raw_fd(), libc::F_GETFL);
        if fl >= 0 {
            libc::fcntl(file.as_raw_fd(), libc::F_SETFL, fl & !libc::O_NONBLOCK);
        }
    }
    Ok(file)
}

/// Whether `name` in `dir` may be opened for writing (appending, nothing written), never
/// through a link and without waiting (a FIFO there does not hold the caller).
pub fn check_writable_at(dir: &OwnedFd, name: &std::ffi::OsStr) -> io::Result<()> {
    let c = cstr(name)?;
    let flags =
        libc::O_WRONLY | libc::O_APPEND | libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_NOCTTY | libc::O_CLOEXEC;
    // SAFETY: a valid directory fd and a NUL-terminated name.
    let fd = unsafe { libc::openat(dir.as_raw_fd(), c.as_ptr(), flags) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: just opened, owned here; closed at once.
    let file = unsafe { OwnedFd::from_raw_fd(fd) };
    // An append-only file opens for appending, but cannot be replaced.
    check_attributes(&file)
}

/// Whether a file's mode says not to write it (no write permission bit for anyone): the
/// file tools refuse to replace such a file, even for root, whom the rename would allow.
pub fn read_only_mode(st: &libc::stat) -> bool {
    st.st_mode & 0o222 == 0
}

/// Whether the file `name` in `dir` can be replaced by renaming another file over it, as
/// far as the file itself decides: not when it is append-only or immutable (`chattr +a` /
/// `+i`). Permission to write the file is not needed (a rename needs only the directory's),
/// and a read-only mount already fails the staging beside it. Never through a link, never
/// waiting (a FIFO there does not hold the caller); a file this user may not read, or a
/// file system without attributes, passes (its rename will tell).
pub fn check_replaceable_at(dir: &OwnedFd, name: &std::ffi::OsStr) -> io::Result<()> {
    let c = cstr(name)?;
    let flags = libc::O_RDONLY | libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_NOCTTY | libc::O_CLOEXEC;
    // SAFETY: a valid directory fd and a NUL-terminated name.
    let fd = unsafe { libc::openat(dir.as_raw_fd(), c.as_ptr(), flags) };
    if fd < 0 {
        return Ok(());
    }
    // SAFETY: just opened, owned here; closed at once.
    check_attributes(&unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Refuses an open file that is append-only or immutable (its attribute flags).
fn check_attributes(file: &OwnedFd) -> io::Result<()> {
    const FS_IMMUTABLE_FL: libc::c_long = 0x10;
    const FS_APPEND_FL: libc::c_long = 0x20;
    let mut attrs: libc::c_long = 0;
    // SAFETY: FS_IOC_GETFLAGS writes the file's attribute flags (an int) into `attrs`.
    let r = unsafe { libc::ioctl(file.as_raw_fd(), libc::FS_IOC_GETFLAGS, &mut attrs) };
    if r == 0 && attrs & (FS_IMMUTABLE_FL | FS_APPEND_FL) != 0 {
        return Err(io::Error::new(io::ErrorKind::PermissionDenied, "the file is append-only or immutable (chattr)"));
    }
    Ok(())
}

/// The subdirectory `name` of `parent`, never through a link: a link or a file there is
/// the OS's `ENOTDIR` (or `ELOOP`) error, nothing `NotFound`.
pub fn open_subdir(parent: &OwnedFd, name: &std::ffi::OsStr) -> io::Result<OwnedFd> {
    let c = cstr(name)?;
    // SAFETY: a valid directory fd and a NUL-terminated name.
    let fd = unsafe { libc::openat(parent.as_raw_fd(), c.as_ptr(), DIR_FLAGS) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: just opened, owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Makes the directory `name` in `parent` with `mode` (the umask may only take bits
/// away); whether it made it (`false`: something is there already, perhaps not a
/// directory: open it with [`open_subdir`] to know).
pub fn make_subdir(parent: &OwnedFd, name: &std::ffi::OsStr, mode: u32) -> io::Result<bool> {
    let c = cstr(name)?;
    // SAFETY: a valid directory fd and a NUL-terminated name.
    if unsafe { libc::mkdirat(parent.as_raw_fd(), c.as_ptr(), mode as libc::mode_t) } == 0 {
        return Ok(true);
    }
    let e = io::Error::last_os_error();
    if e.kind() == io::ErrorKind::AlreadyExists {
        Ok(false)
    } else {
        Err(e)
    }
}

/// The directory `base` (following a link, as a lookup by path does) as an `O_PATH`
/// handle: enough for the `*at` calls and [`open_subdir`], and needing only search
/// permission on it, not read permission.
pub fn open_base(base: &Path) -> io::Result<OwnedFd> {
    let c = cstr(base.as_os_str())?;
    // SAFETY: a NUL-terminated path.
    let fd = unsafe { libc::open(c.as_ptr(), libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: just opened, owned here.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// What the open file or directory `fd` is (`fstat`; an `O_PATH` handle works too, and no
/// permission on it is needed).
pub fn stat_fd(fd: &OwnedFd) -> io::Result<libc::stat> {
    // SAFETY: a zeroed stat is a valid value to be overwritten.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: a valid fd and a writable stat.
    if unsafe { libc::fstat(fd.as_raw_fd(), &mut st) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(st)
}

/// The names in the directory `dir` (`.` and `..` left out).
pub fn list_dir(dir: &OwnedFd) -> io::Result<Vec<std::ffi::OsString>> {
    use std::os::unix::ffi::OsStringExt;
    // fdopendir takes the descriptor it is given: a new one for the same directory (not a
    // duplicate, whose read position `dir`'s other users would share), so `dir` stays
    // open and untouched.
    // SAFETY: a valid directory fd and a NUL-terminated name.
    let dup =
        unsafe { libc::openat(dir.as_raw_fd(), c".".as_ptr(), libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC) };
    if dup < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `dup` is ours; on success the stream owns it and closedir closes it.
    let stream = unsafe { libc::fdopendir(dup) };
    if stream.is_null() {
        let e = io::Error::last_os_error();
        // SAFETY: not taken by a stream.
        unsafe { libc::close(dup) };
        return Err(e);
    }
    let mut names = Vec::new();
    let failed = loop {
        // readdir says an error only through errno (NULL is also the end).
        // SAFETY: errno is this thread's.
        unsafe { *libc::__errno_location() = 0 };
        // SAFETY: a live stream; each entry is read before the next call.
        let entry = unsafe { libc::readdir(stream) };
        if entry.is_null() {
            // SAFETY: as above.
            let errno = unsafe { *libc::__errno_location() };
            break (errno != 0).then(|| io::Error::from_raw_os_error(errno));
        }
        // SAFETY: readdir returns an entry whose d_name is NUL-terminated.
        let name = unsafe { std::ffi::CStr::from_ptr((*entry).d_name.as_ptr()) }.to_bytes().to_vec();
        if name != b"." && name != b".." {
            names.push(std::ffi::OsString::from_vec(name));
        }
    };
    // SAFETY: the stream from fdopendir, closed once.
    unsafe { libc::closedir(stream) };
    failed.map_or(Ok(names), Err)
}

/// What `name` in `dir` is, the link itself when it is one (`AT_SYMLINK_NOFOLLOW`).
pub fn stat_at(dir: &OwnedFd, name: &std::ffi::OsStr) -> io::Result<libc::stat> {
    let c = cstr(name)?;
    // SAFETY: a zeroed stat is a valid value to be overwritten.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: a valid fd, a NUL-terminated name, a writable stat.
    if unsafe { libc::fstatat(dir.as_raw_fd(), c.as_ptr(), &mut st, libc::AT_SYMLINK_NOFOLLOW) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(st)
}

/// Renames `from` to `to` within `dir` (neither followed if a link: the entries move).
pub fn rename_in(dir: &OwnedFd, from: &std::ffi::OsStr, to: &std::ffi::OsStr) -> io::Result<()> {
    let (a, b) = (cstr(from)?, cstr(to)?);
    // SAFETY: a valid directory fd and NUL-terminated names.
    if unsafe { libc::renameat(dir.as_raw_fd(), a.as_ptr(), dir.as_raw_fd(), b.as_ptr()) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// The regular file `name` in `dir` opened for reading, as [`open_file`] opens it (no link,
/// no wait on a FIFO).
pub fn open_file_in(dir: &OwnedFd, name: &std::ffi::OsStr) -> io::Result<std::fs::File> {
    open_file_at(dir, name, Path::new(name))
}

/// Removes `name` from `dir`: a file (or link, never followed), or with `empty_dir` an
/// empty directory (a directory with anything in it is an error, and left alone).
pub fn unlink_at(dir: &OwnedFd, name: &std::ffi::OsStr, empty_dir: bool) -> io::Result<()> {
    let c = cstr(name)?;
    let flags = if empty_dir { libc::AT_REMOVEDIR } else { 0 };
    // SAFETY: a valid fd and a NUL-terminated name.
    if unsafe { libc::unlinkat(dir.as_raw_fd(), c.as_ptr(), flags) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A private folder made by an older version (0755) or by hand is narrowed; one made
    /// here is 0700; a link at the name is left alone (and not followed).
    #[test]
    fn a_private_dir_is_made_or_narrowed_never_through_a_link() {
        use std::os::unix::fs::PermissionsExt;
        let d = tempfile::tempdir().unwrap();
        let base = d.path();
        let mode = |p: &Path| std::fs::symlink_metadata(p).unwrap().permissions().mode() & 0o777;
        make_private_dir(base, Path::new(".forge/view")).unwrap();
        assert_eq!(mode(&base.join(".forge/view")), 0o700);
        std::fs::set_permissions(base.join(".forge/view"), std::fs::Permissions::from_mode(0o755)).unwrap();
        make_private_dir(base, Path::new(".forge/view")).unwrap();
        assert_eq!(mode(&base.join(".forge/view")), 0o700, "narrowed");
        let elsewhere = base.join("elsewhere");
        std::fs::create_dir(&elsewhere).unwrap();
        std::fs::set_permissions(&elsewhere, std::fs::Permissions::from_mode(0o755)).unwrap();
        std::os::unix::fs::symlink(&elsewhere, base.join(".forge/linked")).unwrap();
        make_private_dir(base, Path::new(".forge/linked")).unwrap();
        assert_eq!(mode(&elsewhere), 0o755, "the link's target is not changed");
    }

    #[test]
    fn files_are_read_without_following_links() {
        let d = tempfile::tempdir().unwrap();
        let base = d.path().join("root");
        std::fs::create_dir_all(base.join("dir")).unwrap();
        std::fs::write(base.join("dir/f"), "inside").unwrap();
        std::fs::write(d.path().join("secret"), "outside").unwrap();
        std::os::unix::fs::symlink(d.path().join("secret"), base.join("dir/link")).unwrap();
        std::os::unix::fs::symlink(d.path(), base.join("dirlink")).unwrap();
        assert_eq!(read_file(&base, Path::new("dir/f")).unwrap(), b"inside");
        let e = read_file(&base, Path::new("dir/link")).unwrap_err();
        assert!(e.to_string().contains("symbolic link"), "{e}");
        // The same through a Reader, which keeps its directories.
        let mut reader = Reader::new(&base);
        let mut text = String::new();
        std::io::Read::read_to_string(&mut reader.open(Path::new("dir/f")).unwrap(), &mut text).unwrap();
        assert_eq!(text, "inside");
        assert!(reader.open(Path::new("dir/link")).is_err() && reader.open(Path::new("dirlink/secret")).is_err());
        for i in 0..(Dirs::KEPT + 5) {
            std::fs::create_dir_all(base.join(format!("many/d{i}"))).unwrap();
            std::fs::write(base.join(format!("many/d{i}/f")), "x").unwrap();
            reader.open(&Path::new("many").join(format!("d{i}/f"))).unwrap();
        }
        assert!(reader.dirs.kept.len() <= Dirs::KEPT);
        // A deep chain with siblings at the bottom: each directory opened about once (its
        // ancestors are kept), not its whole chain again per directory.
        let deep: std::path::PathBuf = (0..30).map(|i| format!("l{i}")).collect();
        for i in 0..40 {
            std::fs::create_dir_all(base.join(&deep).join(format!("s{i}"))).unwrap();
            std::fs::write(base.join(&deep).join(format!("s{i}/f")), "x").unwrap();
        }
        let mut reader = Reader::new(&base);
        let opened = |r: &Reader| r.dirs.kept.len();
        for i in 0..40 {
            reader.open(&deep.join(format!("s{i}/f"))).unwrap();
            assert!(opened(&reader) <= Dirs::KEPT + 1);
            assert!(reader.dirs.kept.contains_key(&deep), "the parent of the siblings is kept");
        }
        let e = read_file(&base, Path::new("dirlink/secret")).unwrap_err();
        assert!(e.to_string().contains("dirlink is a symbolic link or not a directory; refusing to follow it"), "{e}");
        let e = read_file(&base, Path::new("dir")).unwrap_err();
        assert!(e.to_string().contains("not a regular file"), "{e}");
        // A FIFO at the name: refused at once, not waited on for a writer.
        let fifo = std::ffi::CString::new(base.join("dir/fifo").as_os_str().as_bytes()).unwrap();
        // SAFETY: a NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
        let e = read_file(&base, Path::new("dir/fifo")).unwrap_err();
        assert!(e.to_string().contains("not a regular file"), "{e}");
        // Nor is the write check held by it (no reader: refused at once), or by a link.
        let dir = open_dir(&base, Path::new("dir"), false).unwrap();
        assert!(check_writable_at(&dir, "fifo".as_ref()).is_err());
        assert!(check_writable_at(&dir, "link".as_ref()).is_err());
        check_writable_at(&dir, "f".as_ref()).unwrap();
        assert_eq!(std::fs::read_to_string(base.join("dir/f")).unwrap(), "inside", "nothing written");
    }

    #[test]
    fn directories_are_listed_and_entries_removed_without_following_links() {
        let d = tempfile::tempdir().unwrap();
        let base = d.path();
        std::fs::create_dir_all(base.join("a/sub")).unwrap();
        std::fs::write(base.join("a/f"), "x").unwrap();
        std::fs::write(base.join("target"), "keep").unwrap();
        std::os::unix::fs::symlink(base.join("target"), base.join("a/link")).unwrap();
        std::os::unix::fs::symlink(base.join("a"), base.join("dirlink")).unwrap();
        let root = open_dir(base, Path::new(""), false).unwrap();
        assert!(open_subdir(&root, "dirlink".as_ref()).is_err(), "a link to a directory is not opened");
        let a = open_subdir(&root, "a".as_ref()).unwrap();
        let mut names = list_dir(&a).unwrap();
        names.sort();
        assert_eq!(names, ["f", "link", "sub"]);
        assert_eq!(list_dir(&a).unwrap().len(), 3, "listed again from the start");
        assert_eq!(stat_at(&a, "link".as_ref()).unwrap().st_mode & libc::S_IFMT, libc::S_IFLNK);
        unlink_at(&a, "link".as_ref(), false).unwrap();
        assert_eq!(std::fs::read_to_string(base.join("target")).unwrap(), "keep");
        std::fs::write(base.join("a/sub/g"), "x").unwrap();
        assert!(unlink_at(&a, "sub".as_ref(), true).is_err(), "not empty");
        std::fs::remove_file(base.join("a/sub/g")).unwrap();
        unlink_at(&a, "sub".as_ref(), true).unwrap();
        assert!(!base.join("a/sub").exists());
    }

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

    fn mode_of(p: &Path) -> u32 {
        use std::os::unix::fs::PermissionsExt;
        std::fs::symlink_metadata(p).unwrap().permissions().mode() & 0o7777
    }

    fn names(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> =
            std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
        v.sort();
        v
    }

    #[test]
    fn a_staged_file_is_renamed_in_the_directory_it_was_staged_in_even_if_that_is_swapped_for_a_link() {
        let d = tempfile::tempdir().unwrap();
        let base = d.path().join("root");
        let outside = d.path().join("outside");
        std::fs::create_dir_all(base.join("a/b")).unwrap();
        std::fs::create_dir_all(&outside).unwrap();
        let staged = stage(&base, Path::new("a/b/f.txt"), b"new", Mode::Exact(0o644), false, false).unwrap();
        assert_eq!(staged.target(), base.join("a/b/f.txt"));
        // Between the staging and the rename, the directory becomes a link outside.
        std::fs::rename(base.join("a/b"), base.join("a/moved")).unwrap();
        std::os::unix::fs::symlink(&outside, base.join("a/b")).unwrap();
        staged.commit().unwrap();
        assert!(names(&outside).is_empty(), "renamed through the link: {:?}", names(&outside));
        assert_eq!(std::fs::read(base.join("a/moved/f.txt")).unwrap(), b"new");
        // Staging again now refuses the link on the way.
        let e = stage(&base, Path::new("a/b/f.txt"), b"x", Mode::Exact(0o644), false, false).err().unwrap();
        assert!(e.to_string().contains("symbolic link"), "{e}");
    }

    #[test]
    fn staging_keeps_the_replaced_files_mode_and_dropping_removes_the_temporary() {
        use std::os::unix::fs::PermissionsExt;
        let d = tempfile::tempdir().unwrap();
        let base = d.path();
        std::fs::write(base.join("run.sh"), "old").unwrap();
        std::fs::set_permissions(base.join("run.sh"), std::fs::Permissions::from_mode(0o750)).unwrap();
        stage(base, Path::new("run.sh"), b"new", Mode::KeepOr(0o666), false, true).unwrap().commit().unwrap();
        assert_eq!(mode_of(&base.join("run.sh")), 0o750);
        assert_eq!(std::fs::read(base.join("run.sh")).unwrap(), b"new");
        // A new file gets the given mode under the umask, as `std::fs::write` does.
        std::fs::write(base.join("probe"), "").unwrap();
        let expected = mode_of(&base.join("probe")) & 0o666;
        stage(base, Path::new("fresh.txt"), b"x", Mode::KeepOr(0o666), false, false).unwrap().commit().unwrap();
        assert_eq!(mode_of(&base.join("fresh.txt")), expected);
        // A link at the name: its target's mode is not taken, and the link is replaced.
        std::fs::write(base.join("target"), "t").unwrap();
        std::fs::set_permissions(base.join("target"), std::fs::Permissions::from_mode(0o700)).unwrap();
        std::os::unix::fs::symlink(base.join("target"), base.join("link")).unwrap();
        stage(base, Path::new("link"), b"l", Mode::KeepOr(0o666), false, false).unwrap().commit().unwrap();
        assert_eq!(mode_of(&base.join("link")), expected);
        assert_eq!(std::fs::read(base.join("target")).unwrap(), b"t");
        // Dropped before the commit: the temporary goes, the file stays.
        let before = names(base);
        let staged = stage(base, Path::new("run.sh"), b"never", Mode::KeepOr(0o666), false, false).unwrap();
        assert_eq!(names(base).len(), before.len() + 1, "the temporary exists while staged");
        drop(staged);
        assert_eq!(names(base), before);
        assert_eq!(std::fs::read(base.join("run.sh")).unwrap(), b"new");
        // commit_all reports the failing index and removes what it did not rename.
        std::fs::create_dir(base.join("dir")).unwrap();
        std::fs::write(base.join("dir/inner"), "").unwrap();
        let a = stage(base, Path::new("a.txt"), b"a", Mode::Exact(0o644), false, false).unwrap();
        let b = stage(base, Path::new("dir"), b"b", Mode::Exact(0o644), false, false).unwrap();
        let c = stage(base, Path::new("c.txt"), b"c", Mode::Exact(0o644), false, false).unwrap();
        let (i, _) = commit_all(vec![a, b, c]).unwrap_err();
        assert_eq!(i, 1, "renaming a file over a non-empty directory fails");
        assert_eq!(std::fs::read(base.join("a.txt")).unwrap(), b"a");
        assert!(!base.join("c.txt").exists());
        assert!(!names(base).iter().any(|n| n.ends_with(".tmp")), "{:?}", names(base));
    }

    #[test]
    fn a_file_set_aside_comes_back_unless_finished() {
        use std::os::unix::fs::PermissionsExt;
        let d = tempfile::tempdir().unwrap();
        let base = d.path();
        std::fs::create_dir(base.join("dir")).unwrap();
        std::fs::write(base.join("dir/a"), "a").unwrap();
        let aside = set_aside(base, Path::new("dir/a")).unwrap().expect("a file");
        assert!(!base.join("dir/a").exists(), "moved aside");
        drop(aside);
        assert_eq!(std::fs::read(base.join("dir/a")).unwrap(), b"a", "renamed back");
        set_aside(base, Path::new("dir/a")).unwrap().unwrap().finish().unwrap();
        assert_eq!(names(&base.join("dir")), Vec::<String>::new(), "removed, nothing left");
        assert!(set_aside(base, Path::new("dir/a")).unwrap().is_none(), "absent");
        assert!(set_aside(base, Path::new("nodir/a")).unwrap().is_none(), "absent directory");
        // A directory without write permission: refused before anything changes (unless
        // root, whom permissions do not stop).
        std::fs::write(base.join("dir/b"), "b").unwrap();
        std::fs::set_permissions(base.join("dir"), std::fs::Permissions::from_mode(0o555)).unwrap();
        let r = set_aside(base, Path::new("dir/b"));
        std::fs::set_permissions(base.join("dir"), std::fs::Permissions::from_mode(0o755)).unwrap();
        // SAFETY: geteuid cannot fail.
        if unsafe { libc::geteuid() } != 0 {
            assert!(r.is_err(), "a read-only directory");
            assert!(base.join("dir/b").exists());
        }
    }

    #[test]
    fn one_stager_opens_each_directory_once() {
        let d = tempfile::tempdir().unwrap();
        let mut stager = Stager::new(d.path());
        let staged: Vec<Staged> = (0..50)
            .map(|i| stager.stage(Path::new(&format!("a/f{i}")), b"x", Mode::Exact(0o644), true, false).unwrap())
            .collect();
        let other = stager.stage(Path::new("b/g"), b"y", Mode::Exact(0o644), true, false).unwrap();
        assert!(staged.iter().all(|s| std::sync::Arc::ptr_eq(&s.dir, &staged[0].dir)), "one descriptor for a/");
        assert!(!std::sync::Arc::ptr_eq(&other.dir, &staged[0].dir));
        std::fs::write(d.path().join("a/old"), "o").unwrap();
        let aside = stager.set_aside(Path::new("a/old")).unwrap().unwrap();
        assert!(std::sync::Arc::ptr_eq(&aside.dir, &staged[0].dir));
        commit_all(staged).unwrap();
        other.commit().unwrap();
        aside.finish().unwrap();
        assert_eq!(names(&d.path().join("a")).len(), 50);
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
