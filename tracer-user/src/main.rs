use clap::Parser;
use thrtrace::say;
use thrtrace::{
    attach::launch::LaunchError,
    cli::{Action, Cli},
    error::{EXIT_FAILURE, EXIT_USAGE, UsageError},
};
use tracer_model::log::LogError;

fn main() {
    let cli = Cli::parse();
    let result = match &cli.action {
        Some(Action::Dump(args)) => thrtrace::readers::dump::run(args),
        Some(Action::Info(args)) => thrtrace::readers::info::run(args),
        Some(Action::Convert(args)) => thrtrace::readers::convert::run(args),
        Some(Action::Generate(args)) => thrtrace::manual::generate(&args.what),
        None => cli.into_config().and_then(thrtrace::run),
    };
    let code = match result {
        Ok(code) => code,
        Err(error) => {
            say!("thrtrace-bpf: {error:#}");
            // A log that cannot be read is bad input, like a bad option.
            if error.is::<UsageError>() || error.is::<LogError>() {
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
