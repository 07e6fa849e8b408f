//! The password file (`~/.pgpass`, or `PGPASSFILE` / `passfile`), as libpq reads it
//! (libpq chapter, "The Password File").
//!
//! Each line is `hostname:port:database:username:password`; `*` in one of the first four
//! fields matches anything; `\` makes the next character literal (`\:`, `\\`); lines
//! starting with `#` are comments. The first matching line wins. A Unix-socket connection
//! to the default socket directory matches the host name `localhost`. Like libpq, the file
//! is ignored (with no error) unless it is a plain file that neither group nor others can
//! read or write: anything else could leak the passwords it holds.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

/// What a line of the file is matched against.
pub(crate) struct PassKey<'a> {
    pub host: &'a str,
    pub port: &'a str,
    pub dbname: &'a str,
    pub user: &'a str,
}

/// Why the file was not used, for callers that want to say so.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Skipped {
    Missing,
    NotAFile,
    Permissions,
}

/// The password for `key` from the file at `path`, if the file is usable and a line
/// matches.
pub(crate) fn lookup(path: &Path, key: &PassKey<'_>) -> Result<Option<String>, Skipped> {
    let meta = std::fs::metadata(path).map_err(|_| Skipped::Missing)?;
    if !meta.is_file() {
        return Err(Skipped::NotAFile);
    }
    if meta.permissions().mode() & 0o077 != 0 {
        return Err(Skipped::Permissions);
    }
    let text = std::fs::read_to_string(path).map_err(|_| Skipped::Missing)?;
    Ok(find(&text, key))
}

/// The password of the first line of `text` that matches `key`.
pub(crate) fn find(text: &str, key: &PassKey<'_>) -> Option<String> {
    let wanted = [key.host, key.port, key.dbname, key.user];
    text.lines()
        .map(|line| line.strip_suffix('\r').unwrap_or(line))
        .filter(|line| !line.starts_with('#') && !line.is_empty())
        .find_map(|line| {
            let fields = split_line(line)?;
            let (matchers, password) = fields.split_at(4);
            let all_match = matchers
                .iter()
                .zip(wanted)
                .all(|(field, value)| field.wildcard || field.text == value);
            all_match.then(|| password.first().map(|f| f.text.clone()).unwrap_or_default())
        })
}

struct Field {
    text: String,
    /// Written as a bare `*` (an escaped `\*` is a literal star).
    wildcard: bool,
}

/// Splits a line into its five unescaped fields; `None` for a line with fewer than five
/// (libpq skips those). Like libpq, the password ends at the next unescaped `:`.
fn split_line(line: &str) -> Option<Vec<Field>> {
    let mut fields: Vec<Field> = Vec::with_capacity(5);
    let mut text = String::new();
    let mut escaped = false;
    let mut chars = line.chars();
    loop {
        let c = chars.next();
        match c {
            Some('\\') => {
                escaped = true;
                if let Some(next) = chars.next() {
                    text.push(next);
                }
            }
            Some(':') | None => {
                let wildcard = !escaped && text == "*";
                fields.push(Field {
                    text: std::mem::take(&mut text),
                    wildcard,
                });
                escaped = false;
                if c.is_none() || fields.len() == 5 {
                    break;
                }
            }
            Some(c) => text.push(c),
        }
    }
    (fields.len() == 5).then_some(fields)
}
