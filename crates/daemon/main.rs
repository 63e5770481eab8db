//! The `switchboard` binary: parses the command line, runs it, and turns errors into a
//! message and an exit code (2 for config errors, 1 for the rest).

use std::process::ExitCode;

use clap::Parser;
use switchboard::cli::{Cli, Command};
use switchboard::config::ConfigError;
#[cfg(feature = "mcp")]
use switchboard::mcp_cli;
use switchboard::{
    cli, cron, doctor, early_stop, harden, logging, memory_cli, onboard, pairing, service, status,
    terminal, usage_cli,
};

fn main() -> ExitCode {
    let cli = Cli::parse();
    if let Command::SandboxExec { .. } = cli.command {
        // Before any runtime or thread: the helper isolates and confines itself and runs
        // one command.
        return sandbox_exec(cli.command);
    }
    prepare_process(&cli);
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
    // The daemon's future is large (its whole start is one `async fn`), and lives on the
    // main thread's stack, which is there anyway: boxing it would put ~13 KiB on the heap
    // of every daemon, idle or not (tokio boxes one past 16 KiB itself: see `run`).
    #[allow(clippy::large_futures)]
    let result = runtime.block_on(run(cli.command));
    match result {
        Ok(code) => code,
        Err(err) => {
            // `switchboard usage | head`: the reader had all it wanted.
            let broken_pipe = err.chain().any(|cause| {
                cause
                    .downcast_ref::<std::io::Error>()
                    .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
            });
            if broken_pipe {
                return ExitCode::SUCCESS;
            }
            if let Some(config_error) = err.downcast_ref::<ConfigError>() {
                eprintln!("switchboard: config error: {config_error}");
                return ExitCode::from(2);
            }
            eprintln!("switchboard: {err:#}");
            ExitCode::FAILURE
        }
    }
}

/// Whether a command logs only its errors (unless `RUST_LOG` says otherwise): every one that
/// prints its own answer — all but the daemon and the sandbox helper.
fn quiet(command: &Command) -> bool {
    match command {
        Command::Run { .. } | Command::SandboxExec { .. } => false,
        Command::Agent { .. }
        | Command::Pairing { .. }
        | Command::Cron { .. }
        | Command::Onboard { .. }
        | Command::Status { .. }
        | Command::Doctor { .. }
        | Command::Usage { .. }
        | Command::Memory { .. } => true,
        #[cfg(feature = "mcp")]
        Command::Mcp { .. } => true,
    }
}

/// `switchboard sandbox-exec` (hidden): runs one command confined, exec's helper.
fn sandbox_exec(command: Command) -> ExitCode {
    use switchboard_tools::sandbox::{self, RunAs, SandboxArgs};
    let Command::SandboxExec {
        probe_isolation,
        workspace,
        tmp,
        forbid,
        uid,
        gid,
        isolation,
        command,
    } = command
    else {
        return ExitCode::FAILURE;
    };
    let code = if probe_isolation {
        sandbox::probe_isolation()
    } else {
        sandbox::run_sandboxed(&SandboxArgs {
            workspace: workspace.unwrap_or_default(),
            tmp: tmp.unwrap_or_default(),
            forbidden: forbid,
            run_as: uid.zip(gid).map(|(uid, gid)| RunAs { uid, gid }),
            isolation,
            command: command.unwrap_or_default(),
        })
    };
    ExitCode::from(u8::try_from(code).unwrap_or(1))
}

/// Before any thread: the commands that run tools keep no secret in their environment (this
/// may start the binary again, in place) and are not dumpable; the daemon holds a stop back
/// until it can stop cleanly (see `early_stop`), across the start again; then logging.
fn prepare_process(cli: &Cli) {
    let daemon = matches!(cli.command, Command::Run { .. });
    if daemon {
        early_stop::hold();
    }
    let hardened = match &cli.command {
        Command::Run { config, .. } | Command::Agent { config, .. } => {
            let path = cli::resolve_config(config.as_deref()).ok();
            // SAFETY: the first thing `main` does with the environment, on its only thread
            // (no runtime, no other thread yet), and no descriptor of ours is open but stdio.
            #[allow(unsafe_code)]
            let withdrawal = unsafe { harden::withdraw_secrets(path.as_deref()) };
            Some((withdrawal, harden::not_dumpable()))
        }
        _ => None,
    };
    if daemon {
        early_stop::catch();
    }
    logging::init(cli.log_format, quiet(&cli.command));
    if let Some((withdrawal, dumpable)) = hardened {
        withdrawal.log();
        if let Err(err) = dumpable {
            tracing::warn!(error = %err, "the process could not be made non-dumpable");
        }
    }
}

/// Runs a command (all but `sandbox-exec`, which runs before the runtime). The daemon's
/// future stays unboxed: it lives on the main thread's stack (see `main`). The operator's
/// commands are boxed: this future is as large as its largest arm, and tokio moves one past
/// 16 KiB to the heap — the terminal's (a whole turn) and `doctor`'s would put the daemon's
/// there too, on every daemon, for a command it never runs.
#[allow(clippy::large_futures)]
async fn run(command: Command) -> anyhow::Result<ExitCode> {
    match command {
        Command::Run { config, role } => service::run_until_signal(config.as_deref(), role).await,
        Command::Agent {
            config,
            message,
            session,
        } => Box::pin(terminal::run(config.as_deref(), message, &session)).await,
        Command::Pairing { config, action } => {
            Box::pin(pairing::run(config.as_deref(), &action)).await
        }
        Command::Cron { config, action } => Box::pin(cron::run(config.as_deref(), &action)).await,
        #[cfg(feature = "mcp")]
        Command::Mcp { config, action } => match action {
            switchboard::cli::McpAction::List => Box::pin(mcp_cli::list(config.as_deref())).await,
        },
        Command::Onboard {
            workspace,
            config,
            provider,
            model,
            base_url,
            api_key_env,
            credential_key,
            state_dir,
            service,
            force,
        } => {
            use onboard::service as at;
            fn preset<T: From<&'static str>>(
                service: bool,
                value: Option<T>,
                default: &'static str,
            ) -> Option<T> {
                match value {
                    None if service => Some(default.into()),
                    value => value,
                }
            }
            let choices = onboard::Choices {
                provider,
                model,
                base_url,
                api_key_env,
                credential_key: preset(service, credential_key, at::KEY),
                workspace: preset(service, workspace, at::WORKSPACE),
                state_dir: preset(service, state_dir, at::STATE_DIR),
            };
            onboard_with(preset(service, config, at::CONFIG), choices, force)
        }
        Command::Status { config } => Box::pin(status::run(config.as_deref())).await,
        Command::Usage { config, days } => Box::pin(usage_cli::run(config.as_deref(), days)).await,
        Command::Memory { config, action } => {
            tokio::task::block_in_place(|| memory_cli::run(config.as_deref(), action))
        }
        Command::Doctor { config } => Box::pin(doctor::run(config.as_deref())).await,
        Command::SandboxExec { .. } => Ok(ExitCode::FAILURE),
    }
}

/// `switchboard onboard`: only a workspace when nothing else is asked, else a config too.
fn onboard_with(
    config: Option<std::path::PathBuf>,
    choices: onboard::Choices,
    force: bool,
) -> anyhow::Result<ExitCode> {
    let only_workspace = config.is_none()
        && choices.provider.is_none()
        && choices.model.is_none()
        && choices.base_url.is_none()
        && choices.api_key_env.is_none()
        && choices.credential_key.is_none()
        && choices.state_dir.is_none();
    match &choices.workspace {
        Some(workspace) if only_workspace => onboard::run(workspace, force),
        _ => {
            let path = config
                .or_else(|| cli::resolve_config(None).ok())
                .or_else(cli::default_config_path)
                .ok_or_else(|| anyhow::anyhow!("no place for a config: pass --config PATH"));
            path.and_then(|path| onboard::with_config(&path, choices, force))
        }
    }
}
