//! The section of a part left out of the build by its cargo feature (`[mcp]`, `[cluster]`),
//! as `switchboard_adapter::NotBuilt` is a channel's and `component::NotBuilt` a component's:
//! the config may still have it, and is then refused, saying how to build the part in.

/// What a part left out of the build is called: its section and its cargo feature are its
/// `NAME`; `WHAT` is how a person would say it.
pub trait LeftOut {
    const NAME: &'static str;
    const WHAT: &'static str;
}

/// The section of a part left out of the build by its cargo feature (`[mcp]`, `[cluster]`),
/// as `switchboard_adapter::NotBuilt` is a channel's: any table reads (nothing of it kept),
/// and a config that has one is refused, saying how to build the part in.
pub struct NotBuiltSection<F> {
    /// Where the section is, when the config has one.
    at: Option<std::ops::Range<usize>>,
    left_out: std::marker::PhantomData<F>,
}

impl<F> Default for NotBuiltSection<F> {
    fn default() -> Self {
        Self {
            at: None,
            left_out: std::marker::PhantomData,
        }
    }
}

impl<F> std::fmt::Debug for NotBuiltSection<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NotBuiltSection")
            .field("at", &self.at)
            .finish()
    }
}

impl<'de, F> serde::Deserialize<'de> for NotBuiltSection<F> {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let section = toml::Spanned::<serde::de::IgnoredAny>::deserialize(deserializer)?;
        Ok(Self {
            at: Some(section.span()),
            left_out: std::marker::PhantomData,
        })
    }
}

impl<F: LeftOut> NotBuiltSection<F> {
    /// Whether the config is without the section (its problem names the section itself).
    #[allow(dead_code, reason = "used only in a build that leaves a part out")]
    pub(crate) fn validate(&self) -> Result<(), switchboard_core::ConfigProblem> {
        match &self.at {
            None => Ok(()),
            Some(at) => Err(switchboard_core::ConfigProblem::new(
                Some(at.clone()),
                "",
                format!(
                    "this switchboard was built without {what} (the `{name}` cargo feature): \
                     build it with `--features {name}`, or remove [{name}]",
                    what = F::WHAT,
                    name = F::NAME
                ),
            )),
        }
    }
}

/// MCP, left out.
#[allow(dead_code, reason = "used only in a build without MCP")]
pub struct NoMcp;

impl LeftOut for NoMcp {
    const NAME: &'static str = "mcp";
    const WHAT: &'static str = "MCP";
}

/// The cluster, left out.
#[allow(dead_code, reason = "used only in a build without the cluster")]
pub struct NoCluster;

impl LeftOut for NoCluster {
    const NAME: &'static str = "cluster";
    const WHAT: &'static str = "the cluster";
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(serde::Deserialize)]
    struct Read {
        #[serde(default)]
        mcp: NotBuiltSection<NoMcp>,
    }

    #[test]
    fn a_section_left_out_of_the_build_is_refused_only_when_written() {
        let without: Read = toml::from_str("").expect("reads");
        assert!(without.mcp.validate().is_ok());
        let with: Read = toml::from_str("[mcp.servers.files]\ncommand = \"npx\"\n").expect("reads");
        let problem = with.mcp.validate().expect_err("refused");
        assert_eq!(problem.key, "", "the section itself");
        assert!(problem.span.is_some());
        assert!(
            problem.message.contains("--features mcp"),
            "{}",
            problem.message
        );
    }
}
