use clap::{CommandFactory, Parser};
use thrtrace::say;
use thrtrace::{
    attach::launch::LaunchError,
    capture::features::KernelTooOld,
    cli::{Action, Cli},
    error::{EXIT_FAILURE, EXIT_USAGE, UsageError},
};
use tracer_model::log::LogError;

fn main() {
    let cli = Cli::try_parse().unwrap_or_else(|error| usage_error(error));
    let result = match &cli.action {
        Some(Action::Dump(args)) => thrtrace::readers::dump::run(args),
        Some(Action::Info(args)) => thrtrace::readers::info::run(args),
        Some(Action::Convert(args)) => thrtrace::readers::convert::run(args),
        Some(Action::Ctl(args)) => thrtrace::control::client::run(args),
        Some(Action::Report(args)) => thrtrace::readers::report::run(args),
        Some(Action::Generate(args)) => thrtrace::manual::generate(&args.what, Cli::command()),
        None => cli.into_config().and_then(thrtrace::run),
    };
    let code = match result {
        Ok(code) => code,
        Err(error) => {
            say!("thrtrace-bpf: {error:#}");
            // A log that cannot be read is bad input, like a bad option; so is a kernel below
            // the floor, which the user can change and we cannot.
            if error.is::<UsageError>() || error.is::<LogError>() || error.is::<KernelTooOld>() {
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

/// A command line clap refused: help and version as clap prints them; an error as one line,
/// like every other bad input, with exit status 2.
fn usage_error(error: clap::Error) -> ! {
    use clap::error::ErrorKind;
    if matches!(
        error.kind(),
        ErrorKind::DisplayHelp
            | ErrorKind::DisplayVersion
            | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
    ) {
        error.exit();
    }
    // The message is the text before the usage, its lines joined ("the following required
    // arguments were not provided: <NAME>").
    let text = error.to_string();
    let message: Vec<&str> = text
        .lines()
        .take_while(|line| !line.trim().is_empty())
        .map(str::trim)
        .collect();
    let message = message.join(" ");
    say!(
        "thrtrace-bpf: {}; see --help",
        message
            .trim_start_matches("error: ")
            .trim_end_matches(['.', ':'])
    );
    std::process::exit(EXIT_USAGE);
}
