//! `thrtrace-bpf list`: the event table as a user chooses from it (as `perf list` and
//! `bpftrace -l` list theirs): every category and event, the C library function it is
//! recorded from, and what `--contended` records of it. Any name of the first three columns
//! is a name `--events` takes.

use std::io::{self, Write};

use tracer_common::{Category, ContendedProbe, EventDef};

use crate::say::{StdoutError, to_stdout};

/// Prints the list; returns the exit status.
pub fn run() -> Result<i32, StdoutError> {
    to_stdout(write_list)?;
    Ok(0)
}

fn write_list(out: &mut impl Write) -> io::Result<()> {
    writeln!(
        out,
        "{:<9} {:<26} {:<28} --contended records",
        "CATEGORY", "EVENT", "FUNCTION"
    )?;
    for category in Category::ALL.into_iter().filter(|c| c.is_traced()) {
        for event in category.events() {
            writeln!(
                out,
                "{:<9} {:<26} {:<28} {}",
                category.name(),
                event.name,
                event.symbol,
                contended_records(event)
            )?;
        }
    }
    writeln!(
        out,
        "\n--events (-e) takes any name above, a category, an event or a function (which stands \
         for every event it records), separated by commas or colons: -e mutex,cond_wait or \
         -e pthread_mutex_lock:sem_wait. Without it a trace records every event but futex's. \
         rmutex events are the pthread_mutex_* calls on recursive mutexes."
    )
}

/// What `--contended` records of `event`'s calls, in the list's words.
fn contended_records(event: &EventDef) -> &'static str {
    match event.contended() {
        ContendedProbe::Waits => "the calls that wait",
        ContendedProbe::Wakes => "the calls that wake a waiter",
        ContendedProbe::Whole => "every call",
        ContendedProbe::BlockedInKernel => "the waits that block",
        ContendedProbe::Untraced => "-",
    }
}

#[cfg(test)]
mod tests {
    use tracer_model::selection::EventSet;

    use super::*;

    #[test]
    fn every_name_listed_is_one_events_takes() {
        let mut listed = Vec::new();
        write_list(&mut listed).unwrap();
        let listed = String::from_utf8(listed).unwrap();
        let rows: Vec<&str> = listed
            .lines()
            .skip(1)
            .take_while(|l| !l.is_empty())
            .collect();
        assert_eq!(rows.len(), tracer_common::EVENTS.len());
        for row in rows {
            let names: Vec<&str> = row.split_whitespace().take(3).collect();
            for name in names {
                assert!(EventSet::parse(name).is_ok(), "{name} of {row}");
            }
        }
        assert!(
            listed.contains("mutex     mutex_lock                 pthread_mutex_lock           the calls that wait"),
            "{listed}"
        );
    }
}
