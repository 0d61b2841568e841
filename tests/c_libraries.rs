//! The C libraries the tests build workloads against besides each architecture's own glibc
//! (Debian 12's 2.36: the host's on x86-64, the cross compiler's on arm64): other Debian
//! releases' packages, which xtask unpacks under `target/` and the tests' build script finds
//! there. One table that both include, since a build script cannot import xtask.

/// Which C library.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Family {
    Glibc,
    Musl,
}

/// A C library of a Debian release, for one architecture.
pub struct CLibrary {
    pub family: Family,
    pub version: &'static str,
    /// Debian's name for the architecture it is built for (`amd64`, `arm64`).
    pub arch: &'static str,
    /// The Debian release whose packages it is.
    pub suite: &'static str,
}

/// On x86-64, Debian 11's glibc 2.31, whose pthread functions are in libpthread.so.0, and
/// Debian 13's 2.41 (musl there is the host's musl-gcc). On arm64, 2.41, and Debian 12's musl
/// (the x86-64 host's musl-tools is of no use to a cross build). glibc 2.31 is x86-64 only:
/// finding the functions in libpthread.so.0 does not depend on the architecture, and every
/// C library more costs each emulated arm64 boot a run of every record test.
pub const C_LIBRARIES: [CLibrary; 4] = [
    CLibrary {
        family: Family::Glibc,
        version: "2.31",
        arch: "amd64",
        suite: "bullseye",
    },
    CLibrary {
        family: Family::Glibc,
        version: "2.41",
        arch: "amd64",
        suite: "trixie",
    },
    CLibrary {
        family: Family::Glibc,
        version: "2.41",
        arch: "arm64",
        suite: "trixie",
    },
    CLibrary {
        family: Family::Musl,
        version: "1.2.3",
        arch: "arm64",
        suite: "bookworm",
    },
];

impl CLibrary {
    /// Its directory under `target/`: `glibc-2.41` for the architecture of the machine
    /// (`host`, as Debian names it), as cargo leaves the host's builds unnamed too;
    /// `glibc-2.41-arm64`, `musl-1.2.3-arm64` for another.
    pub fn dir_name(&self, host: &str) -> String {
        let family = match self.family {
            Family::Glibc => "glibc",
            Family::Musl => "musl",
        };
        match self.arch == host {
            true => format!("{family}-{}", self.version),
            false => format!("{family}-{}-{}", self.version, self.arch),
        }
    }
}
