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
