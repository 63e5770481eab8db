//! Whom a message would ping: Discord's `allowed_mentions` rules, read as Discord reads
//! them, so tests can check that nothing the bot sent pings anyone it should not.

use serde_json::Value;

/// Who a message would ping under `allowed` (Discord's rules: without `allowed_mentions`
/// every mention pings; with it, only the kinds in `parse` and the ids listed).
pub fn pings(content: &str, allowed: Option<&Value>, replied_author: Option<u64>) -> Vec<String> {
    let parse = |kind: &str| {
        allowed.is_none_or(|a| {
            a["parse"]
                .as_array()
                .is_some_and(|p| p.iter().any(|k| k == kind))
        })
    };
    let listed = |key: &str, id: &str| {
        allowed.is_some_and(|a| {
            a[key]
                .as_array()
                .is_some_and(|ids| ids.iter().any(|i| i.as_str() == Some(id)))
        })
    };
    let mut pinged = Vec::new();
    if (content.contains("@everyone") || content.contains("@here")) && parse("everyone") {
        pinged.push("everyone".to_owned());
    }
    let mut rest = content;
    while let Some(start) = rest.find("<@") {
        let after = &rest[start + 2..];
        let Some(end) = after.find('>') else { break };
        let inner = &after[..end];
        if let Some(role) = inner.strip_prefix('&') {
            if parse("roles") || listed("roles", role) {
                pinged.push(format!("role:{role}"));
            }
        } else {
            let user = inner.trim_start_matches('!');
            if !user.is_empty()
                && user.bytes().all(|b| b.is_ascii_digit())
                && (parse("users") || listed("users", user))
            {
                pinged.push(format!("user:{user}"));
            }
        }
        rest = &after[end..];
    }
    if let Some(author) = replied_author {
        let replied = allowed.is_none_or(|a| a["replied_user"].as_bool() == Some(true));
        if replied {
            pinged.push(format!("user:{author}"));
        }
    }
    pinged.sort();
    pinged.dedup();
    pinged
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn pings_follow_discords_allowed_mentions_rules() {
        let text = "@everyone look <@&55> and <@!42> and <@43>";
        assert_eq!(
            pings(text, None, Some(42)),
            ["everyone", "role:55", "user:42", "user:43"]
        );
        let none = json!({"parse": [], "users": [], "roles": [], "replied_user": false});
        assert!(pings(text, Some(&none), Some(42)).is_empty());
        let author = json!({"parse": [], "users": ["42"], "replied_user": true});
        assert_eq!(pings(text, Some(&author), Some(42)), ["user:42"]);
    }
}
