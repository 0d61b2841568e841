use clap::Parser;
use thrtrace::say;
use thrtrace::{
    attach::launch::LaunchError,
    cli::Cli,
    error::{EXIT_FAILURE, EXIT_USAGE, UsageError},
};

fn main() {
    let code = match Cli::parse().into_config().and_then(thrtrace::run) {
        Ok(code) => code,
        Err(error) => {
            say!("thrtrace-bpf: {error:#}");
            if error.is::<UsageError>() {
                EXIT_USAGE
            } else if let Some(launch) = error.downcast_ref::<LaunchError>() {
                launch.exit_code()
            } else {
                EXIT_FAILURE
            }
        }
    };
    std::process::exit(code);
}
