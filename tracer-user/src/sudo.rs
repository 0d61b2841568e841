//! The user who ran `sudo thrtrace-bpf`: a launched command runs as them, and the files the
//! tracer creates belong to them, so that they can read, move and delete their trace.

/// A user and group id, as sudo passes them in `SUDO_UID` and `SUDO_GID`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InvokingUser {
    pub uid: u32,
    pub gid: u32,
}

/// The invoking user when running as root under sudo (both variables set and numeric); `None`
/// otherwise, and then what the tracer creates is its own, as with any command.
pub fn invoking_user() -> Option<InvokingUser> {
    if !rustix::process::geteuid().is_root() {
        return None;
    }
    let id = |variable| std::env::var(variable).ok()?.parse().ok();
    Some(InvokingUser {
        uid: id("SUDO_UID")?,
        gid: id("SUDO_GID")?,
    })
}

/// The home directory of user `uid`, from the password database.
pub fn home_of(uid: u32) -> Option<std::path::PathBuf> {
    use std::os::unix::ffi::OsStrExt as _;
    let mut buffer = vec![0 as libc::c_char; 16 * 1024];
    // SAFETY: a plain C struct, for getpwuid_r to fill; all zeroes is a valid value of it.
    let mut entry: libc::passwd = unsafe { std::mem::zeroed() };
    let mut found: *mut libc::passwd = std::ptr::null_mut();
    // SAFETY: every pointer is to a live local of the size given; the strings written into
    // `entry` point into `buffer`, which outlives their use below.
    let status = unsafe {
        libc::getpwuid_r(
            uid,
            &raw mut entry,
            buffer.as_mut_ptr(),
            buffer.len(),
            &raw mut found,
        )
    };
    if status != 0 || found.is_null() || entry.pw_dir.is_null() {
        return None;
    }
    // SAFETY: getpwuid_r succeeded, so pw_dir is a NUL-terminated string in `buffer`.
    let home = unsafe { std::ffi::CStr::from_ptr(entry.pw_dir) };
    Some(std::ffi::OsStr::from_bytes(home.to_bytes()).into())
}
