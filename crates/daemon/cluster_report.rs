//! What the operator's commands say of the cluster: `switchboard doctor`'s line (NATS
//! reached, its streams and buckets, its members) and `switchboard status`'s part (members,
//! roles, partitions and what waits in them). Alone, nothing.

use crate::config::Config;

/// `switchboard doctor`'s line about the cluster — NATS reached, JetStream's streams and
/// buckets there (made if missing), and who is in it — or what failed. `None` alone.
#[cfg(feature = "cluster")]
pub(crate) async fn doctor(config: &Config) -> Option<Result<String, String>> {
    let section = config.cluster.as_ref()?;
    let resolved = match section.resolve() {
        Ok(resolved) => resolved,
        Err(problem) => return Some(Err(format!("cluster: {}", problem.message))),
    };
    let url = resolved.nats_url.clone();
    let cluster = match Box::pin(switchboard_nats::Cluster::connect(resolved)).await {
        Ok(cluster) => cluster,
        Err(err) => return Some(Err(format!("cluster: {err}"))),
    };
    Some(match cluster.survey().await {
        Ok(survey) => {
            let held = survey
                .leases
                .keys()
                .filter(|key| key.starts_with("p."))
                .count();
            Ok(format!(
                "cluster: NATS {} at {url}, JetStream streams and buckets ready; {} members \
                 ({}), {held} of {} partitions held",
                survey.server,
                survey.members.len(),
                survey
                    .members
                    .iter()
                    .map(|(name, role)| format!("{name}: {role}"))
                    .collect::<Vec<_>>()
                    .join(", "),
                cluster.config().partitions,
            ))
        }
        Err(err) => Err(format!("cluster: {err}")),
    })
}

/// `switchboard doctor`'s line about the cluster — NATS reached, JetStream's streams and
/// buckets there (made if missing), and who is in it — or what failed. `None` alone.
#[cfg(not(feature = "cluster"))]
pub(crate) async fn doctor(_config: &Config) -> Option<Result<String, String>> {
    None
}

/// `switchboard status`'s part about the cluster: the members, their roles and partitions,
/// and the messages waiting in each partition. `None` alone.
#[cfg(feature = "cluster")]
pub(crate) async fn status(config: &Config) -> Option<String> {
    use std::fmt::Write as _;
    let section = config.cluster.as_ref()?;
    let resolved = match section.resolve() {
        Ok(resolved) => resolved,
        Err(problem) => return Some(format!("✗ cluster: {}\n", problem.message)),
    };
    let partitions = resolved.partitions;
    let name = resolved.name.clone();
    let cluster = match Box::pin(switchboard_nats::Cluster::connect(resolved)).await {
        Ok(cluster) => cluster,
        Err(err) => return Some(format!("✗ cluster: {err}\n")),
    };
    let survey = match cluster.survey().await {
        Ok(survey) => survey,
        Err(err) => return Some(format!("✗ cluster: {err}\n")),
    };
    let mut out = format!(
        "cluster {name}: {} members, NATS {}\n",
        survey.members.len(),
        survey.server
    );
    let held_by = |member: &str| -> Vec<u32> {
        (0..partitions)
            .filter(|p| {
                survey
                    .leases
                    .get(&format!("p.{p}"))
                    .is_some_and(|m| m == member)
            })
            .collect()
    };
    for (member, role) in &survey.members {
        let held = held_by(member);
        let _ = write!(out, "  {member:<16} {role:<8}");
        if !held.is_empty() {
            let parts: Vec<String> = held
                .iter()
                .map(|p| format!("{p} ({} waiting)", survey.lag.get(p).copied().unwrap_or(0)))
                .collect();
            let _ = write!(out, " partitions {}", parts.join(", "));
        }
        out.push('\n');
    }
    let unheld: Vec<String> = (0..partitions)
        .filter(|p| !survey.leases.contains_key(&format!("p.{p}")))
        .map(|p| p.to_string())
        .collect();
    if !unheld.is_empty() {
        let _ = writeln!(out, "  ✗ no worker holds partitions {}", unheld.join(", "));
    }
    // The platforms' connections and the duties: who runs each.
    for (lease, member) in survey
        .leases
        .iter()
        .filter(|(key, _)| !key.starts_with("p."))
    {
        let _ = writeln!(out, "  {lease:<24} held by {member}");
    }
    Some(out)
}

/// `switchboard status`'s part about the cluster: the members, their roles and partitions,
/// and the messages waiting in each partition. `None` alone.
#[cfg(not(feature = "cluster"))]
pub(crate) async fn status(_config: &Config) -> Option<String> {
    None
}
