//! thrtrace-bpf: traces the pthread calls of unmodified processes with uprobes.
//!
//! Follow one record: it is born in `tracer-ebpf` (a uprobe/uretprobe per traced function, put
//! there by [`attach`]), crosses to userspace through per-CPU ring buffers and becomes a
//! `tracer_model::TraceRecord` in [`capture`], and is written by the [`sinks`]. The
//! [`session`] runs the loop that moves records from one to the other; [`cli`] is the command
//! line.

#[macro_use]
mod say;

pub mod attach;
pub mod capture;
pub mod cli;
pub mod error;
pub mod session;
pub mod sinks;
pub mod sudo;

use anyhow::{Context, Result};
use tracer_common::{Category, EventDef};

use crate::{
    attach::{
        exec_follow, launch,
        probes::{self, Probes},
        targets::{self, PthreadLibrary},
    },
    capture::{
        datapath::{DataPath, Scope},
        decode::Decoder,
        kernel::{self, TaskOffsets},
    },
    cli::{Config, Target},
    session::{Session, stop_signals::StopSignals},
    sinks::{descriptors, tr::TrFiles},
};

/// Traces as `config` says; returns the tracer's exit status.
pub fn run(mut config: Config) -> Result<i32> {
    // rmutex calls are recorded by the mutex probes (told apart when decoded).
    let mut probed: Vec<Category> = config
        .categories
        .iter()
        .map(|c| c.probed_through())
        .collect();
    probed.sort();
    probed.dedup();
    let events: Vec<&'static EventDef> = probed.iter().flat_map(|c| c.events()).collect();
    let symbols: Vec<&str> = events.iter().map(|e| e.symbol).collect();
    if config.list_probes {
        return list_probes(&config, &events, &symbols);
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let stop_signals = {
        let _context = runtime.enter();
        StopSignals::catch_and_hold().context("cannot catch SIGINT and SIGTERM")?
    };
    descriptors::raise_limit();
    let scope = match (&config.target, config.follow) {
        (Target::SystemWide, _) => Scope::SystemWide,
        (_, true) => Scope::Follow,
        (_, false) => Scope::Processes,
    };
    let mut datapath = DataPath::load(
        TaskOffsets::from_kernel_btf()?,
        config.ring_bytes,
        config.empty_programs,
        config.lossless,
        scope,
    )?;
    let mut probes = Probes::new(events, config.probe_at_entry);
    let follow = config.follow;
    // Said only once the targets' execs are followed too: the line tells users it is ready.
    let mut followed = Vec::new();
    let mut attach = |pid: u32, library: &PthreadLibrary| {
        if follow {
            probes.attach_shared(&mut datapath, pid, library)?;
            followed.push(format!(
                "thrtrace-bpf: tracing pid {pid} and its children: probes in {}",
                library.file.path
            ));
            Ok(())
        } else if targets::main_thread_exited(pid) {
            probes.attach_after_main_thread(&mut datapath, pid, library)
        } else {
            probes.attach_library(&mut datapath, pid, library)
        }
    };

    let (attached_pids, launched) = match &config.target {
        Target::Pids(pids) => {
            let mut traced = Vec::new();
            for &pid in pids {
                let libraries = targets::find_pthread_libraries(pid, &symbols)?;
                if libraries.is_empty() {
                    say!("thrtrace-bpf: {}", targets::no_pthread_functions(pid));
                    continue;
                }
                for library in &libraries {
                    attach(pid, library)?;
                }
                traced.push(pid);
            }
            (traced, None)
        }
        Target::Command(argv) => (
            Vec::new(),
            Some(launch::launch(argv, &symbols, attach, follow)?),
        ),
        // Each distinct library file once; the tracer's own calls are skipped in BPF.
        Target::SystemWide => {
            probes.attach_new_libraries(&mut datapath)?;
            (Vec::new(), None)
        }
    };

    // Under --follow, the targets are also traced through exec into other libraries.
    let exec_requests = follow
        .then(|| {
            let launched_pid = launched
                .as_ref()
                .filter(|l| l.exited.is_none())
                .map(|l| l.child.id());
            exec_follow::start(
                attached_pids.clone(),
                launched_pid,
                symbols.clone(),
                datapath.take_stopped_view(),
            )
        })
        .transpose()?;
    for line in followed {
        say!("{line}");
    }
    let output = config
        .output
        .take()
        .context("no output directory to write the trace to")?;
    let shown_dir = output.path().display().to_string();
    let session = Session {
        datapath,
        probes,
        decoder: Decoder::new(kernel::realtime_offset_ns(), &config.categories),
        sink: Box::new(TrFiles::new(
            output,
            config.unbuffered,
            descriptors::open_file_budget(),
        )),
        unbuffered: config.unbuffered,
        duration: config.duration,
        attached_pids,
        launched,
        until_stopped: matches!(config.target, Target::SystemWide),
        follow: config.follow,
        exec_requests,
        stop_signals,
    };
    let outcome = runtime.block_on(session.run())?;
    say!(
        "thrtrace-bpf: {} records written, {} lost, {} files in {}",
        outcome.summary.records,
        outcome.losses.total(),
        outcome.summary.files,
        shown_dir
    );
    if outcome.lossless_stops > 0 {
        say!(
            "thrtrace-bpf: --lossless stopped traced threads {} times until the rings \
             were drained",
            outcome.lossless_stops
        );
    }
    if config.verbose {
        say!("thrtrace-bpf: lost per CPU: {}", outcome.losses.split());
    }
    Ok(outcome.exit_code)
}

/// `--list-probes`: where each probe would go in each target's pthread library.
fn list_probes(config: &Config, events: &[&'static EventDef], symbols: &[&str]) -> Result<i32> {
    let Target::Pids(pids) = &config.target else {
        usage_bail!("--list-probes takes -p PID");
    };
    let mut table = String::new();
    for &pid in pids {
        let libraries = targets::find_pthread_libraries(pid, symbols)?;
        if libraries.is_empty() {
            table += &format!("{}\n", targets::no_pthread_functions(pid));
        }
        for library in &libraries {
            table += &format!("{} (pid {pid})\n", library.file.path);
            table += &probes::describe(&probes::plan(library, events, config.probe_at_entry));
        }
    }
    // As `head` expects: output that nobody reads any more is not an error.
    let _ = std::io::Write::write_all(&mut std::io::stdout().lock(), table.as_bytes());
    Ok(0)
}
