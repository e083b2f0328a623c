//! Reading and editing an LXC container config file (`<lxcpath>/<name>/config`).
//!
//! The format is `lxc.container.conf(5)`: one `key = value` per line, `#` comments, blank lines;
//! a key may repeat (`lxc.mount.entry`, `lxc.cgroup.devices.allow`), and order matters for some
//! keys, so the file is kept as a list of lines. Editing replaces only the keys it is asked to,
//! keeps every other line (comments, `lxc.include`, the template's settings) where it was, and
//! appends new keys at the end.

/// One line of a config file.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Line {
    /// `key = value` (both trimmed).
    Entry { key: String, value: String },
    /// A comment, a blank line or anything that is not an entry, kept verbatim.
    Other(String),
}

/// An LXC config file, line by line.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct LxcConfig {
    lines: Vec<Line>,
}

impl LxcConfig {
    /// Parses the text of a config file. Never fails: lines that are not `key = value` are kept
    /// as they are.
    pub fn parse(text: &str) -> Self {
        let lines = text
            .lines()
            .map(|l| {
                let t = l.trim();
                if t.starts_with('#') || t.is_empty() {
                    return Line::Other(l.to_string());
                }
                match t.split_once('=') {
                    Some((k, v)) if !k.trim().is_empty() => {
                        Line::Entry { key: k.trim().to_string(), value: v.trim().to_string() }
                    }
                    _ => Line::Other(l.to_string()),
                }
            })
            .collect();
        LxcConfig { lines }
    }

    /// The last value of `key` (LXC lets a later single-valued key override an earlier one).
    pub fn get(&self, key: &str) -> Option<&str> {
        self.get_all(key).pop()
    }

    /// Every value of `key`, in file order.
    pub fn get_all(&self, key: &str) -> Vec<&str> {
        self.lines
            .iter()
            .filter_map(|l| match l {
                Line::Entry { key: k, value } if k == key => Some(value.as_str()),
                _ => None,
            })
            .collect()
    }

    /// Sets `key` to exactly `values` (empty: removes the key). The new values take the place of
    /// the first existing occurrence, or go to the end of the file when the key was absent.
    pub fn set_all(&mut self, key: &str, values: &[String]) {
        let first = self.lines.iter().position(|l| matches!(l, Line::Entry { key: k, .. } if k == key));
        self.lines.retain(|l| !matches!(l, Line::Entry { key: k, .. } if k == key));
        let new = values.iter().map(|v| Line::Entry { key: key.to_string(), value: v.clone() });
        match first {
            Some(at) => {
                let tail = self.lines.split_off(at);
                self.lines.extend(new);
                self.lines.extend(tail);
            }
            None => self.lines.extend(new),
        }
    }

    /// Sets the single-valued `key` to `value`.
    pub fn set(&mut self, key: &str, value: &str) {
        self.set_all(key, &[value.to_string()]);
    }

    /// The file's text (`key = value` lines, other lines verbatim, trailing newline).
    pub fn render(&self) -> String {
        let mut out = String::new();
        for l in &self.lines {
            match l {
                Line::Entry { key, value } => {
                    out.push_str(key);
                    out.push_str(" = ");
                    out.push_str(value);
                }
                Line::Other(s) => out.push_str(s),
            }
            out.push('\n');
        }
        out
    }
}

/// Escapes a path for an fstab-style `lxc.mount.entry` field: space, tab, newline and backslash
/// become octal escapes (`\040` …), as `getmntent(3)` reads them back.
pub fn escape_mount_path(path: &str) -> String {
    let mut out = String::with_capacity(path.len());
    for c in path.chars() {
        match c {
            ' ' => out.push_str("\\040"),
            '\t' => out.push_str("\\011"),
            '\n' => out.push_str("\\012"),
            '\\' => out.push_str("\\134"),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    const SAMPLE: &str = "# Template used to create this container\n\
lxc.net.0.type = veth\n\
lxc.net.0.link = lxcbr0\n\
lxc.apparmor.profile = generated\n\
lxc.mount.entry = /a a none bind 0 0\n\
\n\
lxc.include = /usr/share/lxc/config/debian.common.conf\n\
lxc.mount.entry = /b b none bind 0 0\n\
lxc.uts.name = web\n";

    #[test]
    fn parse_get_and_round_trip() {
        let c = LxcConfig::parse(SAMPLE);
        assert_eq!(c.get("lxc.net.0.link"), Some("lxcbr0"));
        assert_eq!(c.get_all("lxc.mount.entry"), vec!["/a a none bind 0 0", "/b b none bind 0 0"]);
        assert_eq!(c.get("lxc.start.auto"), None);
        assert_eq!(c.render(), SAMPLE);
        // Spacing is normalised, values keep inner `=`.
        let c = LxcConfig::parse("lxc.environment=A=b\n  lxc.uts.name   =  x  \n");
        assert_eq!(c.get("lxc.environment"), Some("A=b"));
        assert_eq!(c.render(), "lxc.environment = A=b\nlxc.uts.name = x\n");
    }

    #[test]
    fn set_replaces_in_place_and_appends_new_keys() {
        let mut c = LxcConfig::parse(SAMPLE);
        c.set("lxc.apparmor.profile", "unconfined");
        c.set_all("lxc.mount.entry", &["/c c none bind 0 0".to_string()]);
        c.set("lxc.start.auto", "1");
        assert_eq!(
            c.render(),
            "# Template used to create this container\n\
lxc.net.0.type = veth\n\
lxc.net.0.link = lxcbr0\n\
lxc.apparmor.profile = unconfined\n\
lxc.mount.entry = /c c none bind 0 0\n\
\n\
lxc.include = /usr/share/lxc/config/debian.common.conf\n\
lxc.uts.name = web\n\
lxc.start.auto = 1\n"
        );
        c.set_all("lxc.mount.entry", &[]);
        assert!(c.get_all("lxc.mount.entry").is_empty());
    }

    #[test]
    fn mount_paths_are_escaped() {
        assert_eq!(escape_mount_path("/srv/my data\\x"), "/srv/my\\040data\\134x");
        assert_eq!(escape_mount_path("/srv/plain"), "/srv/plain");
    }
}
