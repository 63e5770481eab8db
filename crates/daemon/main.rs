//! The `switchboard` binary: parses the command line, runs it, and turns errors into a
//! message and an exit code (2 for config errors, 1 for the rest).

use std::process::ExitCode;

use clap::Parser;
use switchboard::cli::{Cli, Command};
use switchboard::config::ConfigError;
use switchboard::{app, cli, doctor, logging, onboard, pairing, status, terminal};

fn main() -> ExitCode {
    let cli = Cli::parse();
    if let Command::SandboxExec {
        workspace,
        tmp,
        forbid,
        command,
    } = cli.command
    {
        // Before any runtime or thread: the helper confines itself and runs one command.
        let code =
            switchboard_tools::sandbox::run_sandboxed(&switchboard_tools::sandbox::SandboxArgs {
                workspace,
                tmp,
                forbidden: forbid,
                command,
            });
        return ExitCode::from(u8::try_from(code).unwrap_or(1));
    }
    let quiet = matches!(
        cli.command,
        Command::Agent { .. }
            | Command::Pairing { .. }
            | Command::Onboard { .. }
            | Command::Status { .. }
            | Command::Doctor { .. }
    );
    logging::init(cli.log_format, quiet);
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("switchboard: cannot start the async runtime: {err}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async {
        match cli.command {
            Command::Run { config } => app::run_until_signal(config.as_deref()).await,
            Command::Agent {
                config,
                message,
                session,
            } => terminal::run(config.as_deref(), message, &session).await,
            Command::Pairing { config, action } => pairing::run(config.as_deref(), &action),
            Command::Onboard {
                workspace,
                config,
                provider,
                model,
                base_url,
                api_key_env,
                force,
            } => {
                let only_workspace = config.is_none()
                    && provider.is_none()
                    && model.is_none()
                    && base_url.is_none()
                    && api_key_env.is_none();
                match workspace {
                    Some(workspace) if only_workspace => onboard::run(&workspace, force),
                    workspace => {
                        let choices = onboard::Choices {
                            provider,
                            model,
                            base_url,
                            api_key_env,
                            workspace,
                        };
                        let path = config
                            .or_else(|| cli::resolve_config(None).ok())
                            .or_else(cli::default_config_path)
                            .ok_or_else(|| {
                                anyhow::anyhow!("no place for a config: pass --config PATH")
                            });
                        path.and_then(|path| onboard::with_config(&path, choices, force))
                    }
                }
            }
            Command::Status { config } => status::run(config.as_deref()).await,
            Command::Doctor { config } => doctor::run(config.as_deref()).await,
            Command::SandboxExec { .. } => Ok(ExitCode::FAILURE),
        }
    });
    match result {
        Ok(code) => code,
        Err(err) => {
            if let Some(config_error) = err.downcast_ref::<ConfigError>() {
                eprintln!("switchboard: config error: {config_error}");
                return ExitCode::from(2);
            }
            eprintln!("switchboard: {err:#}");
            ExitCode::FAILURE
        }
    }
}
