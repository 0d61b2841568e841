//! Profiles read back by Go's own `go tool pprof`, as its `-raw` output prints them.

use std::process::Command;

use crate::TempDir;

/// A sample of `go tool pprof -raw`: its values, its frames' functions (innermost first, inlined
/// functions before their callers) and its labels as printed.
#[derive(Debug)]
pub struct Sample {
    /// Its contentions.
    pub count: u64,
    /// Its delay, in nanoseconds.
    pub delay_ns: u64,
    /// Its frames' functions, innermost first.
    pub functions: Vec<String>,
    /// Its labels, as printed.
    pub labels: String,
}

/// A profile as `go tool pprof -raw` prints it: its comments, samples and mappings (each as
/// its line: `1: start/limit/offset file build-id [FN]...`).
#[derive(Debug)]
pub struct RawProfile {
    /// Its comments.
    pub comments: Vec<String>,
    /// Its samples.
    pub samples: Vec<Sample>,
    /// Its mappings, a line each.
    pub mappings: Vec<String>,
}

/// `go tool pprof -raw` of `file` in `dir`, with the profile's own symbols (nothing looked up
/// again by pprof).
pub fn pprof_raw(dir: &TempDir, file: &str) -> RawProfile {
    pprof_raw_of(dir, &[file])
}

/// `go tool pprof -raw` of `files` in `dir` merged into one profile, as pprof merges the
/// profiles it is given.
pub fn pprof_raw_of(dir: &TempDir, files: &[&str]) -> RawProfile {
    let run = Command::new("go")
        .args(["tool", "pprof", "-raw", "-symbolize=none"])
        .args(files)
        .current_dir(dir.path())
        .output()
        .expect("go tool pprof runs (`cargo xtask setup` installs golang-go)");
    let stdout = String::from_utf8_lossy(&run.stdout).into_owned();
    assert!(
        run.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&run.stderr)
    );
    parse_raw(&stdout)
}

/// Parses `-raw` output: a `Samples:` section (a `count delay: location ids` line, then label
/// lines), then `Locations` (`id: address M=mapping function file:line s=0`, then a line per
/// caller of an inlined function).
fn parse_raw(text: &str) -> RawProfile {
    let mut comments = Vec::new();
    let mut samples: Vec<(u64, u64, Vec<u64>, String)> = Vec::new();
    let mut locations: Vec<(u64, Vec<String>)> = Vec::new();
    let mut mappings = Vec::new();
    let mut section = "";
    for line in text.lines() {
        if let Some(comment) = line.strip_prefix("Comment: ") {
            comments.push(comment.to_owned());
            continue;
        }
        match line.trim() {
            heading @ ("Samples:" | "Locations" | "Mappings") => {
                section = heading;
                continue;
            }
            "" => continue,
            _ => {}
        }
        let fields: Vec<&str> = line.split_whitespace().collect();
        match section {
            "Samples:" => {
                if let Some(count) = fields[0].parse::<u64>().ok()
                    && let Some(delay) = fields.get(1).and_then(|f| f.strip_suffix(':'))
                {
                    let ids = fields[2..].iter().map(|id| id.parse().unwrap()).collect();
                    samples.push((count, delay.parse().unwrap(), ids, String::new()));
                } else if let Some(sample) = samples.last_mut() {
                    sample.3 += line.trim();
                    sample.3 += " ";
                }
            }
            // `id: 0x55.. M=2 alpha_5 stack_chains.c:55 s=0`; unnamed: `id: 0x55.. M=2`; in no
            // mapping, a name that may hold spaces: `id: 0x0 lock rw (rwlock) :0 s=0`; then a
            // line per function an inlined one above was inlined into: `name file:line s=0`.
            "Locations" => {
                let (id, rest) = match fields[0].strip_suffix(':') {
                    Some(id) => (Some(id.parse().unwrap()), &fields[2..]),
                    None => (None, &fields[..]),
                };
                let rest = match rest.first() {
                    Some(mapping) if mapping.starts_with("M=") => &rest[1..],
                    _ => rest,
                };
                let function = (rest.len() >= 3).then(|| rest[..rest.len() - 2].join(" "));
                match id {
                    Some(id) => locations.push((id, function.into_iter().collect())),
                    None => locations.last_mut().unwrap().1.extend(function),
                }
            }
            "Mappings" => mappings.push(line.to_owned()),
            _ => {}
        }
    }
    let samples = samples
        .into_iter()
        .map(|(count, delay_ns, ids, labels)| Sample {
            count,
            delay_ns,
            functions: ids
                .iter()
                .flat_map(|id| {
                    locations
                        .iter()
                        .find(|(location, _)| location == id)
                        .unwrap_or_else(|| panic!("no location {id} in {text}"))
                        .1
                        .clone()
                })
                .collect(),
            labels,
        })
        .collect();
    RawProfile {
        comments,
        samples,
        mappings,
    }
}
