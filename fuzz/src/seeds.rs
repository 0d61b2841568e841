//! Writes the fuzzer's first inputs into the directory given: the good logs, the logs cut
//! short and the malformed-log corpus of the tests, each as the fuzz target reads it (a mode byte first).
use std::path::PathBuf;

use thrtrace_tests::corpus;

fn main() {
    let dir = PathBuf::from(std::env::args_os().nth(1).expect("usage: seeds DIR"));
    std::fs::create_dir_all(&dir).expect("create the seed directory");
    let mut logs = corpus::corpus(&dir);
    logs.push(("good", corpus::good_log(&dir)));
    logs.extend(
        corpus::cut_short(&dir)
            .into_iter()
            .map(|(name, bytes, _)| (name, bytes)),
    );
    for (name, bytes) in logs {
        for mode in [0u8, 1] {
            let mut input = vec![mode];
            input.extend_from_slice(&bytes);
            std::fs::write(dir.join(format!("{name}-{mode}")), input).expect("write a seed");
        }
    }
    for scratch in ["good.ptl", "good-loop.ptl"] {
        let _ = std::fs::remove_file(dir.join(scratch));
    }
}
