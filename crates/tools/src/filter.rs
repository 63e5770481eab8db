//! [`ToolFilter`]: which of the daemon's tools an agent offers its model — every tool, the
//! ones its `tools` names, minus the ones its `exclude_tools` names — and the one way a
//! pattern names tools ([`matches_name`]), shared with the approvals' `tools`.

use std::sync::{Arc, Mutex, PoisonError};

use crate::registry::ToolRegistry;

/// Whether a tool's `name` is what `pattern` names: the name itself, or with `*` standing
/// for any run of characters (`github__*`, `*__delete_*`) — for a server's tools that come
/// and go.
pub fn matches_name(pattern: &str, name: &str) -> bool {
    let mut parts = pattern.split('*');
    let first = parts.next().unwrap_or_default();
    let Some(mut rest) = name.strip_prefix(first) else {
        return false;
    };
    let parts: Vec<&str> = parts.collect();
    let Some((last, middle)) = parts.split_last() else {
        return rest.is_empty();
    };
    for part in middle {
        match rest.find(part) {
            Some(at) => rest = &rest[at + part.len()..],
            None => return false,
        }
    }
    rest.len() >= last.len() && rest.ends_with(last)
}

/// Which tools pass: those `allow` names (every tool when it is `None`), less those `deny`
/// names. Patterns as [`matches_name`] reads them.
#[derive(Default)]
pub struct ToolFilter {
    allow: Option<Vec<String>>,
    deny: Vec<String>,
    /// The last registry filtered and what passed, so a turn pays for filtering only when
    /// the tools changed (every turn asks).
    last: Mutex<Option<(Arc<ToolRegistry>, Arc<ToolRegistry>)>>,
}

impl std::fmt::Debug for ToolFilter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ToolFilter")
            .field("allow", &self.allow)
            .field("deny", &self.deny)
            .finish_non_exhaustive()
    }
}

impl ToolFilter {
    /// Passes the tools `allow` names (all when `None`) that `deny` does not name.
    pub fn new(allow: Option<Vec<String>>, deny: Vec<String>) -> Self {
        Self {
            allow,
            deny,
            last: Mutex::new(None),
        }
    }

    /// Whether it passes every tool.
    pub fn is_open(&self) -> bool {
        self.allow.is_none() && self.deny.is_empty()
    }

    /// Whether the tool `name` passes.
    pub fn allows(&self, name: &str) -> bool {
        let allowed = self
            .allow
            .as_ref()
            .is_none_or(|allow| allow.iter().any(|pattern| matches_name(pattern, name)));
        allowed && !self.deny.iter().any(|pattern| matches_name(pattern, name))
    }

    /// The tools of `all` that pass; `all` itself when every one does.
    pub fn apply(&self, all: &Arc<ToolRegistry>) -> Arc<ToolRegistry> {
        if self.is_open() {
            return all.clone();
        }
        let mut last = self.last.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some((from, passed)) = &*last
            && Arc::ptr_eq(from, all)
        {
            return passed.clone();
        }
        let mut passed = ToolRegistry::new();
        for name in all.names().filter(|name| self.allows(name)) {
            if let Some(tool) = all.get(name) {
                passed.register(tool.clone());
            }
        }
        let passed = Arc::new(passed);
        *last = Some((all.clone(), passed.clone()));
        passed
    }

    /// The patterns of `allow` and `deny` that name none of `names` (a typo in the config,
    /// or a tool of a server that is not up yet).
    pub fn unmatched<'a>(&'a self, names: &[&str]) -> Vec<&'a str> {
        self.allow
            .iter()
            .flatten()
            .chain(&self.deny)
            .filter(|pattern| !names.iter().any(|name| matches_name(pattern, name)))
            .map(String::as_str)
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::tests::Named;

    #[test]
    fn a_pattern_names_a_tool_whole_or_with_stars() {
        for (pattern, name) in [
            ("exec", "exec"),
            ("github__*", "github__issues"),
            ("*__delete_*", "github__delete_repo"),
            ("*", "anything"),
            ("a*b*c", "abc"),
        ] {
            assert!(matches_name(pattern, name), "{pattern} {name}");
        }
        for (pattern, name) in [
            ("exec", "exec2"),
            ("github__*", "gitlab__issues"),
            ("*__delete_*", "github__list"),
            ("a*b*c", "acb"),
            ("ab*ba", "aba"),
        ] {
            assert!(!matches_name(pattern, name), "{pattern} {name}");
        }
    }

    #[test]
    fn a_filter_passes_what_it_allows_less_what_it_denies_and_caches_the_result() {
        let all = Arc::new(
            ToolRegistry::new()
                .with(Arc::new(Named("read_file")))
                .with(Arc::new(Named("exec")))
                .with(Arc::new(Named("github__issues"))),
        );
        let open = ToolFilter::default();
        assert!(Arc::ptr_eq(&open.apply(&all), &all), "no copy");
        let filter = ToolFilter::new(
            Some(vec!["read_file".into(), "github__*".into(), "nope".into()]),
            vec!["github__issues".into()],
        );
        let passed = filter.apply(&all);
        assert_eq!(passed.names().collect::<Vec<_>>(), ["read_file"]);
        assert!(Arc::ptr_eq(&filter.apply(&all), &passed), "cached");
        assert_eq!(filter.unmatched(&all.names().collect::<Vec<_>>()), ["nope"]);
        let only_deny = ToolFilter::new(None, vec!["exec".into()]);
        assert_eq!(
            only_deny.apply(&all).names().collect::<Vec<_>>(),
            ["github__issues", "read_file"]
        );
    }
}
