use clap::Parser;
use thrtrace::say;
use thrtrace::{
    attach::launch::LaunchError,
    cli::{Action, Cli},
    error::{EXIT_FAILURE, EXIT_USAGE, UsageError},
};

fn main() {
    let cli = Cli::parse();
    let result = match &cli.action {
        Some(Action::Dump(args)) => thrtrace::readers::dump::run(args),
        None => cli.into_config().and_then(thrtrace::run),
    };
    let code = match result {
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
