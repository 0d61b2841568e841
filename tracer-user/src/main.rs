fn main() {
    std::process::exit(thrtrace::main());
}
