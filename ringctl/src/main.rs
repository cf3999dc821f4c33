//! `ringctl`: the command-line tool for slot rings in shared memory.
//!
//! `ringctl demo` streams checksummed frames between processes and reports; `inspect`, `list`
//! and `clean` look after rings on a live system; `pub` and `sub` connect rings to pipelines.
//! Every error is one line on stderr and a non-zero exit status.
#![allow(
    clippy::std_instead_of_core,
    clippy::std_instead_of_alloc,
    reason = "std crate"
)]

#[cfg(feature = "bridge")]
mod bridge;
mod cli;
mod demo;
mod error;
mod frame;
mod grab;
mod inspect;
mod pubsub;
mod ring;
#[cfg_attr(windows, path = "segments_windows.rs")]
mod segments;
mod table;

use std::process::ExitCode;

use clap::Parser as _;

use cli::{Cli, Command};
use error::Result;

/// Exit status when an integrity check fails (the run itself worked).
const EXIT_INTEGRITY: u8 = 1;
/// Exit status for errors (bad input, a failed operation).
const EXIT_ERROR: u8 = 2;
/// Exit status after SIGINT/SIGTERM (128 + SIGINT, as shells report it).
const EXIT_INTERRUPTED: u8 = 130;

fn main() -> ExitCode {
    // A panic is a bug; still, report it as one line rather than a backtrace.
    std::panic::set_hook(Box::new(|info| {
        let what = info
            .payload()
            .downcast_ref::<&str>()
            .map(|s| (*s).to_owned())
            .or_else(|| info.payload().downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "unknown".to_owned());
        let at = info
            .location()
            .map(|l| format!(" at {}:{}", l.file(), l.line()))
            .unwrap_or_default();
        eprintln!("ringctl: internal error (a bug, please report it): {what}{at}");
    }));
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            use clap::error::ErrorKind;
            if matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion)
                || matches!(
                    e.kind(),
                    ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
                )
            {
                let _ = e.print();
                return if e.exit_code() == 0 {
                    ExitCode::SUCCESS
                } else {
                    ExitCode::from(EXIT_ERROR)
                };
            }
            let text = e.to_string();
            let first = text
                .lines()
                .find(|l| !l.trim().is_empty())
                .unwrap_or("invalid arguments")
                .trim_start_matches("error: ");
            eprintln!("ringctl: {first} (see `ringctl --help`)");
            return ExitCode::from(EXIT_ERROR);
        }
    };
    match run(cli.command) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(EXIT_INTEGRITY),
        Err(e) => {
            eprintln!("ringctl: {e}");
            ExitCode::from(match e {
                error::CliError::Interrupted => EXIT_INTERRUPTED,
                _ => EXIT_ERROR,
            })
        }
    }
}

/// Runs one command; `Ok(false)` when it ran but a check failed.
fn run(command: Command) -> Result<bool> {
    match command {
        Command::Demo(args) => demo::run(&args),
        Command::Inspect(args) => inspect::run(&args).map(|()| true),
        Command::List(args) => segments::list(&args).map(|()| true),
        Command::Clean(args) => segments::clean(&args).map(|()| true),
        Command::Pub(args) => pubsub::publish(&args),
        Command::Sub(args) => pubsub::subscribe(&args).map(|()| true),
        Command::Grab(args) => grab::run(&args).map(|()| true),
        #[cfg(feature = "bridge")]
        Command::Bridge(command) => bridge::run(&command),
        Command::DemoProducer(args) => demo::producer::run(&args).map(|()| true),
        Command::DemoConsumer(args) => demo::consumer::run(&args).map(|()| true),
    }
}
