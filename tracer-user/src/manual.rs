//! The manual pages and shell completions, generated from the command line's one definition
//! (`cli::Cli`, handed over as a [`Command`]) by clap_mangen and clap_complete; `cargo xtask install` installs them. What clap
//! does not know (the environment, the files written, the exit statuses) is added here.

use std::{
    io::{self, Write},
    path::{Path, PathBuf},
};

use clap::{Args, Command, Subcommand};
use clap_mangen::{
    Man,
    roff::{Roff, bold, roman},
};

use crate::{
    say::StdoutError,
    sinks::output_dir::{OutputDir, OutputDirError},
};

/// Why the pages or completions were not written.
#[derive(Debug, thiserror::Error)]
pub enum GenerateError {
    #[error(transparent)]
    Dir(#[from] OutputDirError),
    #[error("cannot write the manual page {page}")]
    Page { page: String, source: io::Error },
    #[error(transparent)]
    Print(#[from] StdoutError),
}

/// Writes what `what` names for the command line `command`; returns the exit status.
pub fn generate(what: &Generated, mut command: Command) -> Result<i32, GenerateError> {
    match what {
        Generated::Man { dir } => write_man_pages(dir, command)?,
        Generated::Completions { shell } => {
            let name = command.get_name().to_owned();
            // Made in memory first: clap_complete panics if its writer fails.
            let mut script = Vec::new();
            clap_complete::generate(*shell, &mut command, name, &mut script);
            crate::say::print(&script)?;
        }
    }
    Ok(0)
}

/// One page per command, `thrtrace-bpf.1` with the sections below, each file created as the
/// tracer creates any (`OutputDir`: new, no link followed, mode 0600).
fn write_man_pages(dir: &Path, command: Command) -> Result<(), GenerateError> {
    let dir = OutputDir::open(dir)?;
    let mut command = command.disable_help_subcommand(true);
    // Built, so that subcommands have their display names (`thrtrace-bpf-dump`).
    command.build();
    let subcommands: Vec<clap::Command> = command
        .get_subcommands()
        .filter(|s| !s.is_hide_set())
        .cloned()
        .collect();
    for (page, extra) in subcommands
        .into_iter()
        .map(|s| (s, None))
        .chain([(command, Some(extra_sections()))])
    {
        let man = Man::new(page);
        let page = man.get_filename();
        let mut text = Vec::new();
        let written = man.render(&mut text).and_then(|()| {
            if let Some(extra) = extra {
                text.write_all(extra.render().as_bytes())?;
            }
            let (mut file, _) = dir.create(&page)?;
            file.write_all(&text)
        });
        written.map_err(|source| GenerateError::Page { page, source })?;
    }
    Ok(())
}

const ENVIRONMENT: [(&str, &str); 6] = [
    (
        "THR_TRACE_EVENTS",
        "The categories and events to trace, as --events.",
    ),
    ("THR_TRACE_DIR", "The directory for tr.* files, as --dir."),
    (
        "THR_TRACE_BUF",
        "Any value: write each record as it arrives, as --unbuffered.",
    ),
    (
        "THR_TRACE_LOSSLESS",
        "Any value: never lose a record, as --lossless.",
    ),
    (
        "THRTRACE_RUNTIME_DIR",
        "The directory of the traces' control sockets, instead of /run/thrtrace-bpf; it must be root's and no one else's.",
    ),
    (
        "SUDO_UID, SUDO_GID",
        "Under sudo, the files written belong to this user, and a command given after -- runs as them.",
    ),
];

const FILES: [(&str, &str); 4] = [
    (
        "tr.PPPPPPP.LLL",
        "One per traced thread in the --dir directory: the low 28 bits of the pid and the low 12 \
         bits of the lwpid in hex; one record a line, sec:nsec:lwpid:pid:tid:event1:event2:which:a1:a2:a3:a4:a5. \
         An earlier run's file of the name is kept as NAME.old.",
    ),
    (
        "FILE (--log)",
        "A POSIX trace log: self-checking packets of events and system events, read by dump, \
         info, convert and the C library libposixtrace (<trace.h>).",
    ),
    (
        "/run/thrtrace-bpf/NAME.sock",
        "The control socket of the running trace NAME (mode 0600, in a directory of mode 0700), \
         which thrtrace-bpf ctl NAME talks to; removed when the trace ends.",
    ),
    (
        "DIR (convert)",
        "The tr.* files of a log's run, or a CTF 1.8 trace (metadata and one stream per process).",
    ),
];

const SIGNALS: [(&str, &str); 2] = [
    (
        "SIGINT, SIGTERM",
        "End the trace: the rings are drained, every file is completed, the summary is printed.",
    ),
    (
        "SIGUSR1",
        "Flush the trace: the log's stream (the flight recorder, under --stream-full-policy loop) \
         goes to the log and the tr.* files' buffers to the files; tracing goes on.",
    ),
];

const EXIT_STATUS: [(&str, &str); 5] = [
    ("0", "Traced, or read, as asked."),
    (
        "1",
        "A failure that is not the input's: BPF programs that cannot be loaded, a write that fails.",
    ),
    (
        "2",
        "Bad input: an option, a pid that does not exist, an unusable directory, a log that cannot be read.",
    ),
    (
        "126, 127",
        "The command after -- cannot be run, or is not found.",
    ),
    ("other", "With -- COMMAND, the command's own exit status."),
];

fn extra_sections() -> Roff {
    let mut roff = Roff::new();
    let mut section = |title: &str, items: &[(&str, &str)]| {
        roff.control("SH", [title]);
        for (name, text) in items {
            roff.control("TP", []);
            roff.text([bold(*name)]);
            roff.text([roman(*text)]);
        }
    };
    section("ENVIRONMENT", &ENVIRONMENT);
    section("FILES", &FILES);
    section("SIGNALS", &SIGNALS);
    section("EXIT STATUS", &EXIT_STATUS);
    roff
}

#[derive(Debug, Args)]
pub struct GenerateArgs {
    #[command(subcommand)]
    pub what: Generated,
}

#[derive(Debug, Subcommand)]
pub enum Generated {
    /// The manual pages, thrtrace-bpf.1 and one per subcommand, into DIR
    Man { dir: PathBuf },
    /// The completions for SHELL, on standard output
    Completions {
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
}

#[cfg(test)]
mod tests {
    use tracer_model::{field_names::TR_LINE, tr};

    /// The manual's words for the tr files say what `tracer_model::tr` and the field names do.
    #[test]
    fn the_tr_files_entry_says_what_the_model_defines() {
        let (name, text) = super::FILES[0];
        let example = tr::file_name(0x0123_4567, 0x89a);
        assert!(
            name.starts_with(tr::FILE_PREFIX) && name.len() == example.len(),
            "{name} is named as {example} is"
        );
        assert!(text.contains(&TR_LINE.join(":")), "{text}");
        let bits = |mask: u32| format!("low {} ", mask.count_ones());
        assert!(text.contains(&bits(tr::PID_MASK)), "{text}");
        assert!(text.contains(&bits(tr::LWPID_MASK)), "{text}");
    }
}
