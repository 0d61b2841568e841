//! The `thrtrace-bpf` command: everything it does is in the library (`thrtrace::main`).

fn main() {
    std::process::exit(thrtrace::main());
}
