//! The architectures the tracer is built, packaged and tested for, and each one's names in the
//! toolchains that build for it: Rust's target, Debian's architecture, the GNU triple of its cross
//! compilers and libraries.

/// One architecture the tracer ships for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arch {
    X86_64,
    Aarch64,
}

impl Arch {
    /// Every architecture, the host's first.
    pub const ALL: [Arch; 2] = [Arch::X86_64, Arch::Aarch64];

    /// The architecture this machine runs (and builds for without a `--target`).
    pub const HOST: Arch = Arch::X86_64;

    /// Rust's target triple for glibc.
    pub fn rust_target(self) -> &'static str {
        match self {
            Arch::X86_64 => "x86_64-unknown-linux-gnu",
            Arch::Aarch64 => "aarch64-unknown-linux-gnu",
        }
    }

    /// Debian's name for it (`dpkg --print-architecture`, a `.deb`'s `Architecture`).
    pub fn debian(self) -> &'static str {
        match self {
            Arch::X86_64 => "amd64",
            Arch::Aarch64 => "arm64",
        }
    }

    /// The GNU triple: the multiarch library directory (`lib/TRIPLE`) and the cross tools'
    /// prefix (`TRIPLE-gcc`).
    pub fn gnu_triple(self) -> &'static str {
        match self {
            Arch::X86_64 => "x86_64-linux-gnu",
            Arch::Aarch64 => "aarch64-linux-gnu",
        }
    }

    /// The name uname and archive names use (`x86_64`, `aarch64`).
    pub fn name(self) -> &'static str {
        match self {
            Arch::X86_64 => "x86_64",
            Arch::Aarch64 => "aarch64",
        }
    }

    /// How `readelf --file-header` names its machine (an ELF header's `e_machine`).
    pub fn elf_machine(self) -> &'static str {
        match self {
            Arch::X86_64 => "Advanced Micro Devices X86-64",
            Arch::Aarch64 => "AArch64",
        }
    }

    /// The C compiler that builds for it on this machine.
    pub fn c_compiler(self) -> &'static str {
        match self {
            Arch::X86_64 => "cc",
            Arch::Aarch64 => "aarch64-linux-gnu-gcc",
        }
    }
}
