//! Skills: `skills/<name>/SKILL.md` in the workspace, with front matter naming the skill and
//! saying what it is for. The context lists each one's name, description and path; the model
//! reads a body with `read_file` when it needs it.

use crate::workspace::{EntryKind, Workspace};

/// Skills listed at most (the list is part of every prompt).
const MAX_SKILLS: usize = 64;
/// Bytes of a SKILL.md read to find its front matter.
const FRONT_MATTER_BYTES: usize = 4096;
/// A description longer than this is cut in the list.
const MAX_DESCRIPTION: usize = 300;

/// One skill, as listed in the context.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Skill {
    /// Its name (front matter `name`, else its directory's name).
    pub name: String,
    /// What it is for (front matter `description`).
    pub description: String,
    /// Its file, relative to the workspace.
    pub path: String,
}

/// The skills of the workspace, sorted by directory. Unreadable ones and those without a
/// description are skipped; skills reached through a link leaving the workspace are not
/// read (the workspace refuses them).
pub fn list(workspace: &Workspace) -> Vec<Skill> {
    let Ok(dir) = workspace.resolve("skills") else {
        return Vec::new();
    };
    let Ok(entries) = workspace.read_dir(&dir) else {
        return Vec::new();
    };
    entries
        .iter()
        .filter(|entry| matches!(entry.kind, EntryKind::Dir | EntryKind::Symlink))
        .filter_map(|entry| {
            let path = format!("skills/{}/SKILL.md", entry.name);
            let (text, _) = workspace.read_text(&path, FRONT_MATTER_BYTES).ok()?;
            let (name, description) = front_matter(&text)?;
            Some(Skill {
                name: name.unwrap_or_else(|| entry.name.clone()),
                description: cut(&description, MAX_DESCRIPTION),
                path,
            })
        })
        .take(MAX_SKILLS)
        .collect()
}

/// `name` and `description` from YAML front matter (`---` lines around `key: value` lines;
/// quotes around a value are dropped). `None` without front matter or a description.
pub fn front_matter(text: &str) -> Option<(Option<String>, String)> {
    let mut lines = text.lines();
    if lines.next()?.trim() != "---" {
        return None;
    }
    let mut name = None;
    let mut description = None;
    for line in lines {
        if line.trim() == "---" {
            break;
        }
        let Some((key, value)) = line.split_once(':') else {
            continue;
        };
        let value = unquote(value.trim());
        match key.trim() {
            "name" if !value.is_empty() => name = Some(value.to_owned()),
            "description" if !value.is_empty() => description = Some(value.to_owned()),
            _ => {}
        }
    }
    Some((name, description?))
}

fn unquote(value: &str) -> &str {
    for quote in ['"', '\''] {
        if let Some(inner) = value
            .strip_prefix(quote)
            .and_then(|v| v.strip_suffix(quote))
        {
            return inner;
        }
    }
    value
}

fn cut(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_owned();
    }
    let end = crate::cap::floor_char_boundary(text, max);
    format!("{}…", &text[..end])
}

/// The skills as a section of the system prompt; empty when there are none.
pub fn prompt_section(skills: &[Skill]) -> String {
    if skills.is_empty() {
        return String::new();
    }
    let mut out =
        String::from("## Skills\nRead a skill's file with read_file before you use it.\n");
    for skill in skills {
        out.push_str(&format!(
            "- {} ({}): {}\n",
            skill.name, skill.path, skill.description
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn front_matter_gives_name_and_description() {
        let text = "---\nname: \"weather\"\ndescription: Look up the weather: by city\n---\n# Body";
        assert_eq!(
            front_matter(text),
            Some((
                Some("weather".into()),
                "Look up the weather: by city".into()
            ))
        );
        assert_eq!(front_matter("# no front matter"), None);
        assert_eq!(front_matter("---\nname: x\n---\n"), None);
    }

    #[test]
    fn skills_are_listed_from_the_workspace() {
        let dir = tempfile::tempdir().expect("tempdir");
        let skill = dir.path().join("skills/weather");
        std::fs::create_dir_all(&skill).expect("mkdir");
        std::fs::write(
            skill.join("SKILL.md"),
            "---\nname: weather\ndescription: forecasts\n---\nCall the API.",
        )
        .expect("write");
        std::fs::create_dir_all(dir.path().join("skills/empty")).expect("mkdir");
        let workspace = Workspace::new(dir.path(), &[], true).expect("workspace");
        let skills = list(&workspace);
        assert_eq!(
            skills,
            [Skill {
                name: "weather".into(),
                description: "forecasts".into(),
                path: "skills/weather/SKILL.md".into()
            }]
        );
        assert!(prompt_section(&skills).contains("- weather (skills/weather/SKILL.md): forecasts"));
    }
}
