//! `mail-servers`: the email channel's test servers as a program, for trying the channel by
//! hand — a real Dovecot holding the agent's mailbox (IMAP; mail delivered into it over LMTP)
//! and an SMTP sink that prints every mail the agent sends. Needs Dovecot (`apt-get install
//! dovecot-imapd dovecot-lmtpd`).
//!
//! Usage: `mail-servers`; it prints the `[channels.email]` section to use and where to deliver
//! a mail (e.g. with Python's `smtplib.LMTP`), and runs until Ctrl-C or SIGTERM.

use std::time::Duration;

use switchboard_testkit::email::MailServers;

#[tokio::main(flavor = "current_thread")]
async fn main() -> std::io::Result<()> {
    let servers = MailServers::start().await;
    #[allow(clippy::print_stdout)]
    {
        println!(
            "{}\n# deliver people's mail over LMTP to {} (RCPT TO:<{}>)\n",
            servers.section(&["you@example.com"], ""),
            servers.dovecot.lmtp_addr(),
            switchboard_testkit::email::USER
        );
    }
    let mut shown = 0;
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    loop {
        // Either stop ends the servers (Dovecot with them).
        tokio::select! {
            stop = tokio::signal::ctrl_c() => return stop,
            _ = terminate.recv() => return Ok(()),
            () = tokio::time::sleep(Duration::from_millis(200)) => {}
        }
        let mails = servers.smtp.mails();
        for mail in &mails[shown..] {
            #[allow(clippy::print_stdout)]
            {
                println!(
                    "--- sent to {:?}\n{}\n",
                    mail.to,
                    String::from_utf8_lossy(&mail.raw)
                );
            }
        }
        shown = mails.len();
    }
}
