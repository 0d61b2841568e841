//! `report --format folded` and `report --flamegraph FILE.svg`: the samples of a pprof profile
//! as collapsed stacks, the text flamegraph.pl, inferno and speedscope read (one line per
//! distinct stack: its frames root first, separated by `;`, a space, and its weight), and as a
//! flame graph drawn from them by inferno. The weight is nanoseconds waited: by the stack's
//! waits in the waiters view, by the waits its releases ended in the releasers view. Each stack
//! ends in a frame that names the lock, so that one graph of many locks shows which lock each
//! stack waited on, and the same code path waiting on two locks is two towers, not one.

use std::{collections::BTreeMap, fmt::Write as _, path::Path};

use inferno::flamegraph::{
    self, Options,
    color::{Color, PaletteMap},
};
use tracer_model::analysis::Analysis;

use super::{
    ReadError,
    report::KindArg,
    samples::{LockSamples, StackSample, View},
};
use crate::{
    say::duration,
    sinks::output_dir::{FileKind, head, holds},
    symbolize::Location,
};

/// How many processes a flame graph's title names; more are counted.
const TITLED_PROCESSES: usize = 3;

/// A lock's frame in a flame graph: a light blue, which the code's hot palette never draws.
const LOCK_COLOUR: Color = Color {
    r: 150,
    g: 190,
    b: 240,
};

/// Folded stacks' kind: a first line of frames, a space and a weight; or nothing, as written
/// where no wait had a stack.
pub static FOLDED: FileKind = FileKind {
    name: "file of folded stacks",
    is_one: |file| {
        let head = head(file, 4096)?;
        if head.is_empty() {
            return Ok(true);
        }
        let first = head.split(|&b| b == b'\n').next().unwrap_or_default();
        let mut parts = first.rsplitn(2, |&b| b == b' ');
        Ok(match (parts.next(), parts.next()) {
            (Some(weight), Some(stack)) => {
                !stack.is_empty() && !weight.is_empty() && weight.iter().all(u8::is_ascii_digit)
            }
            _ => false,
        })
    },
};

/// A flame graph's kind: an SVG document.
pub static FLAME_GRAPH: FileKind = FileKind {
    name: "flame graph (SVG)",
    is_one: |file| {
        let head = head(file, 4096)?;
        Ok(head.trim_ascii_start().starts_with(b"<?xml") && holds(&head, b"<svg"))
    },
};

/// The folded stacks of `samples`, one line each, sorted.
pub fn folded(samples: &[LockSamples<'_>]) -> String {
    folded_stacks(samples)
        .into_iter()
        .fold(String::new(), |mut text, (stack, weight)| {
            let _ = writeln!(text, "{stack} {weight}");
            text
        })
}

/// Each distinct folded stack of `samples` and the nanoseconds waited with it: stacks that
/// differ only in what a folded frame leaves out (call sites in one function, offsets) are one.
fn folded_stacks(samples: &[LockSamples<'_>]) -> BTreeMap<String, u64> {
    let mut stacks = BTreeMap::new();
    for lock in samples {
        let lock_frame = lock_frame(lock);
        for sample in &lock.stacks {
            *stacks.entry(folded_stack(sample, &lock_frame)).or_default() += sample.delay_ns;
        }
    }
    stacks
}

/// `sample`'s frames folded root first, with `lock_frame` as the leaf.
fn folded_stack(sample: &StackSample, lock_frame: &str) -> String {
    let mut folded: Vec<String> = sample.frames.iter().rev().flat_map(frames_of).collect();
    folded.extend(sample.unrecorded.clone());
    folded.push(lock_frame.to_owned());
    folded.join(";")
}

/// The frame that tops each stack of `lock`: `lock big_lock (mutex)`.
fn lock_frame(lock: &LockSamples<'_>) -> String {
    frame(&format!("lock {} ({})", lock.name, lock.lock.kind.name()))
}

/// The folded frames `location` stands for, root first: its function, then each function
/// inlined at it, the innermost last; where no function is known, its module's file name and
/// the offset in it (`libc.so.6+0x9ca2f`: an address would differ from run to run); outside
/// every recorded mapping, `[unknown]`, as perf says.
fn frames_of(location: &Location) -> Vec<String> {
    let outer = match (&location.function, &location.module, location.offset) {
        (Some(function), ..) => function.clone(),
        (None, Some(module), Some(offset)) => {
            let file = Path::new(module)
                .file_name()
                .map_or(module.clone(), |name| name.to_string_lossy().into_owned());
            format!("{file}+{offset:#x}")
        }
        _ => "[unknown]".to_owned(),
    };
    std::iter::once(outer.as_str())
        .chain(
            location
                .inlined
                .iter()
                .map(|inlined| inlined.function.as_str()),
        )
        .map(frame)
        .collect()
}

/// `name` as one folded frame: a `;` would split it in two, and a line break end its stack.
fn frame(name: &str) -> String {
    name.replace(';', ",").replace(['\n', '\r'], " ")
}

/// The flame graph of `samples`, of what `analysis` saw of the `kinds` asked for, as SVG; none
/// when no time was waited with a stack (inferno draws only an error then).
pub fn flame_graph(
    analysis: &Analysis,
    samples: &[LockSamples<'_>],
    kinds: &KindArg,
    view: View,
) -> Result<Option<Vec<u8>>, ReadError> {
    let stacks = folded_stacks(samples);
    if stacks.values().all(|&weight| weight == 0) {
        return Ok(None);
    }
    let lines: Vec<String> = stacks
        .into_iter()
        .map(|(stack, weight)| format!("{stack} {weight}"))
        .collect();
    let mut options = Options::default();
    options.title = title(analysis, samples, kinds);
    options.subtitle = Some(
        match view {
            View::Waiters => "waiters' stacks, weighted by time waited (ns)",
            View::Releasers => {
                "releasers' stacks, weighted by the time waited that their releases ended (ns)"
            }
        }
        .to_owned(),
    );
    options.count_name = String::from("ns");
    // The locks in a colour of their own, on top of the code's warm ones: what each tower
    // waited on is seen at a glance.
    let mut colours = PaletteMap::default();
    for lock in samples {
        colours.insert(lock_frame(lock), LOCK_COLOUR);
    }
    options.palette_map = Some(&mut colours);
    // A function has the same colour in every graph, so that two can be compared.
    options.deterministic = true;
    let mut svg = Vec::new();
    flamegraph::from_lines(&mut options, lines.iter().map(String::as_str), &mut svg)
        .map_err(ReadError::FlameGraph)?;
    Ok(Some(svg))
}

/// `Contended waits in stack_chains (pid 4242), all kinds, traced 405.2 ms`: what was traced,
/// which locks the graph is of, and for how long.
fn title(analysis: &Analysis, samples: &[LockSamples<'_>], kinds: &KindArg) -> String {
    let mut processes: Vec<String> = analysis
        .executables()
        .iter()
        .map(|(pid, exe)| {
            let name = Path::new(exe)
                .file_name()
                .map_or(exe.clone(), |name| name.to_string_lossy().into_owned());
            format!("{name} (pid {pid})")
        })
        .collect();
    if processes.is_empty() {
        processes = samples
            .iter()
            .map(|lock| format!("pid {}", lock.lock.pid))
            .collect();
        processes.dedup();
    }
    let target = match processes.len() {
        0 => "the trace".to_owned(),
        n if n > TITLED_PROCESSES => format!(
            "{} and {} more processes",
            processes[..TITLED_PROCESSES].join(", "),
            n - TITLED_PROCESSES
        ),
        _ => processes.join(", "),
    };
    let kinds = kinds
        .kind
        .as_ref()
        .map_or("all kinds".to_owned(), |filter| {
            let names: Vec<&str> = filter.0.iter().map(|kind| kind.name()).collect();
            names.join(", ")
        });
    let traced = analysis
        .first_ns
        .map_or(0, |first| (analysis.last_ns - first).max(0) as u64);
    format!(
        "Contended waits in {target}, {kinds}, traced {}",
        duration(traced)
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::symbolize::InlinedFrame;

    #[test]
    fn a_frame_is_its_function_then_the_functions_inlined_at_it() {
        let location = Location {
            function: Some("worker".to_owned()),
            function_offset: Some(0x1c),
            inlined: vec![
                InlinedFrame {
                    function: "pop".to_owned(),
                    ..InlinedFrame::default()
                },
                InlinedFrame {
                    function: "take".to_owned(),
                    ..InlinedFrame::default()
                },
            ],
            ..Location::default()
        };
        assert_eq!(frames_of(&location), ["worker", "pop", "take"]);
    }

    #[test]
    fn a_frame_with_no_function_is_its_module_and_offset_never_its_address() {
        let in_module = Location {
            address: 0x7f3a_1c09_ca2f,
            module: Some("/usr/lib/x86_64-linux-gnu/libc.so.6".to_owned()),
            offset: Some(0x9ca2f),
            ..Location::default()
        };
        assert_eq!(frames_of(&in_module), ["libc.so.6+0x9ca2f"]);
        let nowhere = Location {
            address: 0x7f3a_1c09_ca2f,
            ..Location::default()
        };
        assert_eq!(frames_of(&nowhere), ["[unknown]"]);
    }

    #[test]
    fn semicolons_and_line_breaks_do_not_split_a_frame() {
        let location = Location {
            function: Some("f<&operator;>()".to_owned()),
            inlined: vec![InlinedFrame {
                function: "g\nh".to_owned(),
                ..InlinedFrame::default()
            }],
            ..Location::default()
        };
        assert_eq!(frames_of(&location), ["f<&operator,>()", "g h"]);
        // A lock's name too (`lock_frame`).
        assert_eq!(frame("lock table;1 (mutex)"), "lock table,1 (mutex)");
    }

    #[test]
    fn a_stack_folds_root_first_with_its_lock_as_the_leaf() {
        let function = |name: &str| Location {
            function: Some(name.to_owned()),
            ..Location::default()
        };
        let waited = Location {
            inlined: vec![InlinedFrame {
                function: "lll_mutex_lock_optimized".to_owned(),
                ..InlinedFrame::default()
            }],
            ..function("pthread_mutex_lock")
        };
        let sample = |frames: Vec<Location>, unrecorded: Option<&str>| StackSample {
            pid: 1,
            frames,
            unrecorded: unrecorded.map(str::to_owned),
            delay_ns: 0,
            threads: Vec::new(),
        };
        let frames = vec![
            waited,
            function("alpha_2"),
            function("alpha_1"),
            function("run"),
        ];
        assert_eq!(
            folded_stack(&sample(frames, None), "lock big_lock (mutex)"),
            "run;alpha_1;alpha_2;pthread_mutex_lock;lll_mutex_lock_optimized;\
             lock big_lock (mutex)"
        );
        // Short waits: their caller, and a frame saying the rest was not recorded.
        let short = sample(vec![function("alpha_2")], Some("[stack not recorded]"));
        assert_eq!(
            folded_stack(&short, "lock big_lock (mutex)"),
            "alpha_2;[stack not recorded];lock big_lock (mutex)"
        );
    }
}
